//! Property tests of the standalone scripts' reply decoders: any reply decodes or is a
//! `Backend` error (never a panic), and a well-formed reply decodes to what it encodes.

use proptest::prelude::*;
use redis::Value;

use super::super::prop_tests::{bulk, name, value};
use super::{decode_acquire, decode_keep_alive, Acquired, Renewed};
use crate::types::{Name, SessionId};
use crate::ErrorKind;

proptest! {

    #[test]
    fn any_reply_decodes_or_is_a_backend_error(v in value()) {
        let sid = SessionId::from_u64(7);
        let lease = Name::new("lease").unwrap();
        if let Err(e) = decode_keep_alive("keep_alive.lua", &v, &sid) {
            prop_assert_eq!(e.kind(), ErrorKind::Backend, "{}", e);
        }
        if let Err(e) = decode_acquire("acquire.lua", &v, &lease) {
            prop_assert_eq!(e.kind(), ErrorKind::Backend, "{}", e);
        }
    }

    #[test]
    fn keep_alive_replies_round_trip(
        remaining_ms in 0i64..i64::MAX,
        gen in 0i64..i64::MAX,
        owned in proptest::option::of(proptest::collection::vec((name(), 1i64..i64::MAX), 0..6)),
        groups in proptest::collection::vec(name(), 0..6),
        before_ms in 1i64..i64::MAX,
    ) {
        let sid = SessionId::from_u64(7);
        let listed = match &owned {
            Some(owned) => Value::Array(owned.iter().flat_map(|(n, t)| [bulk(n.as_str()), Value::Int(*t)]).collect()),
            None => Value::Nil,
        };
        let v = Value::Array(vec![
            Value::Int(remaining_ms),
            Value::Int(gen),
            listed,
            Value::Array(groups.iter().map(|g| bulk(g.as_str())).collect()),
            Value::Int(before_ms),
        ]);
        let got = decode_keep_alive("keep_alive.lua", &v, &sid).unwrap().unwrap();
        let mut want_groups = groups.clone();
        want_groups.sort();
        want_groups.dedup();
        let want_owned = owned
            .map(|o| o.iter().map(|(n, t)| (n.clone(), crate::Token::new(*t as u64).unwrap())).collect());
        let want = Renewed { remaining_ms, gen: gen.to_string(), owned: want_owned, groups: want_groups, before_ms };
        prop_assert_eq!(got, want);
    }

    #[test]
    fn a_negative_remaining_alone_means_gone(r in i64::MIN..0) {
        let sid = SessionId::from_u64(7);
        prop_assert_eq!(decode_keep_alive("keep_alive.lua", &Value::Array(vec![Value::Int(r)]), &sid).unwrap(), None);
    }

    #[test]
    fn acquire_replies_round_trip(
        token in 1i64..i64::MAX,
        remaining_ms in any::<i64>(),
        new in any::<bool>(),
        duration_ms in any::<i64>(),
        gen in 0i64..i64::MAX,
    ) {
        let lease = Name::new("lease").unwrap();
        let v = Value::Array(vec![
            Value::Int(1),
            Value::Int(token),
            Value::Int(remaining_ms),
            Value::Int(i64::from(new)),
            Value::Int(duration_ms),
            Value::Int(gen),
        ]);
        match decode_acquire("acquire.lua", &v, &lease).unwrap() {
            Acquired::Term { token: t, remaining_ms: r, new: n, duration_ms: d, gen: g } => {
                prop_assert_eq!(t.get(), token as u64);
                prop_assert_eq!((r, n, d, g), (remaining_ms, new, duration_ms, gen));
            }
            _ => prop_assert!(false, "not a term"),
        }
    }
}
