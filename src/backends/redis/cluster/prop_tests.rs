//! Property tests of the Cluster scripts' reply decoders: any reply decodes or is a `Backend`
//! error (never a panic), and a well-formed reply decodes to what it encodes.

use std::time::Duration;

use proptest::prelude::*;
use redis::Value;

use super::super::prop_tests::{bulk, name, value};
use super::{decode_renew_slot, session_reply, SlotWork};
use crate::types::{Name, Token};
use crate::ErrorKind;

/// The leases to renew and the groups of a follow-up (`SlotWork` is built in the test).
fn work() -> impl Strategy<Value = (Vec<Name>, Vec<Name>)> {
    (proptest::collection::vec(name(), 0..4), proptest::collection::vec(name(), 0..4))
}

fn slot_work((renew, groups): &(Vec<Name>, Vec<Name>)) -> SlotWork {
    SlotWork { slot: 0, renew: renew.clone(), release: Vec::new(), groups: groups.clone() }
}

proptest! {

    #[test]
    fn any_reply_decodes_or_is_a_backend_error(v in value(), work in work()) {
        if let Err(e) = decode_renew_slot("renew_slot.lua", &v, &slot_work(&work)) {
            prop_assert_eq!(e.kind(), ErrorKind::Backend, "{}", e);
        }
        if let Err(e) = session_reply("acquire_session.lua", &v) {
            prop_assert_eq!(e.kind(), ErrorKind::Backend, "{}", e);
        }
    }

    #[test]
    fn renew_slot_replies_round_trip(
        (work, tokens, live) in work().prop_flat_map(|w| {
            let (r, g) = (w.0.len(), w.1.len());
            (
                Just(w),
                proptest::collection::vec(proptest::option::of(1u64..u64::from(u32::MAX)), r),
                proptest::collection::vec(any::<bool>(), g),
            )
        }),
    ) {
        let v = Value::Array(vec![
            Value::Array(tokens.iter().map(|t| t.map_or_else(|| bulk(""), |t| bulk(&t.to_string()))).collect()),
            Value::Int(0),
            Value::Array(live.iter().map(|l| Value::Int(i64::from(*l))).collect()),
        ]);
        let (got_tokens, got_live) = decode_renew_slot("renew_slot.lua", &v, &slot_work(&work)).unwrap();
        prop_assert_eq!(got_tokens, tokens.iter().map(|t| t.and_then(Token::new)).collect::<Vec<_>>());
        prop_assert_eq!(got_live, live);
    }

    #[test]
    fn session_replies_cap_the_remaining_time_at_the_duration(r in any::<i64>(), d in any::<i64>()) {
        match session_reply("acquire_session.lua", &Value::Array(vec![Value::Int(r), Value::Int(d)])).unwrap() {
            None => prop_assert!(r <= 0),
            Some((remaining, duration)) => {
                prop_assert!(r > 0);
                prop_assert!(remaining <= duration);
                prop_assert_eq!(duration, Duration::from_millis(u64::try_from(d).unwrap_or(0)));
            }
        }
    }
}
