//! Property tests of the decoding of what a Redis server returns (issue 15, item 5): the shared
//! reply helpers and `CLUSTER SLOTS` parsing never panic on any reply, and the strategies the
//! script decoders' tests (`standalone/prop_tests.rs`, `cluster/prop_tests.rs`) share.

use proptest::prelude::*;
use redis::{Value, VerbatimFormat};

use super::reply;
use super::router::SlotMap;
use crate::types::{Name, SessionId};

/// Any reply a server (or a corrupted key, or a different script) could send: every RESP2/RESP3
/// shape, nested a few levels, with numbers near the edges and text that is not UTF-8.
pub(crate) fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        Just(Value::Okay),
        any::<i64>().prop_map(Value::Int),
        prop_oneof![Just(0i64), Just(-1), Just(1), Just(i64::MAX), Just(i64::MIN)].prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
        "[-+]?[0-9]{0,20}".prop_map(|s| Value::BulkString(s.into_bytes())),
        name_text().prop_map(|s| Value::BulkString(s.into_bytes())),
        ".{0,12}".prop_map(Value::SimpleString),
        any::<f64>().prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
        ".{0,12}".prop_map(|text| Value::VerbatimString { format: VerbatimFormat::Text, text }),
    ];
    leaf.prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Set),
            proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Value::Map),
        ]
    })
}

/// Text that is usually a valid name, sometimes not.
pub(crate) fn name_text() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[A-Za-z0-9._:-]{1,12}", 1 => ".{0,8}"]
}

/// A valid name.
pub(crate) fn name() -> impl Strategy<Value = Name> {
    "[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,15}".prop_map(|s| Name::new(s).expect("valid by construction"))
}

pub(crate) fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

proptest! {

    #[test]
    fn reply_helpers_never_panic(v in value()) {
        let sid = SessionId::from_u64(7);
        let _ = reply::int(&v);
        let _ = reply::string(&v);
        let _ = reply::array(&v);
        let _ = reply::token(&v, "lease x", "s.lua");
        let _ = reply::strings(&v, "s.lua");
        let _ = reply::group_names(&v, &sid, "s.lua");
        // The shape error shows a bounded part of the reply, cut on a character boundary.
        let e = reply::unexpected("s.lua", &v);
        prop_assert!(e.to_string().chars().count() < 300, "{e}");
    }

    #[test]
    fn integers_round_trip_in_every_encoding(n in any::<i64>()) {
        prop_assert_eq!(reply::int(&Value::Int(n)), Some(n));
        prop_assert_eq!(reply::int(&bulk(&n.to_string())), Some(n));
        prop_assert_eq!(reply::int(&Value::SimpleString(format!(" {n} "))), Some(n));
        match reply::token(&Value::Int(n), "lease x", "s.lua") {
            Ok(t) => prop_assert_eq!(i64::try_from(t.get()).ok(), Some(n)),
            Err(e) => {
                prop_assert!(n <= 0);
                prop_assert_eq!(e.kind(), crate::ErrorKind::Backend);
            }
        }
    }

    #[test]
    fn group_names_are_sorted_unique_and_valid(names in proptest::collection::vec(name(), 0..8)) {
        let sid = SessionId::from_u64(7);
        let v = Value::Array(names.iter().map(|n| bulk(n.as_str())).collect());
        let mut want = names.clone();
        want.sort();
        want.dedup();
        prop_assert_eq!(reply::group_names(&v, &sid, "s.lua").unwrap(), want);
    }

    #[test]
    fn cluster_slots_parsing_never_panics(v in value(), host in "[a-z0-9.]{0,10}") {
        let _ = SlotMap::parse(&v, &host);
    }

    #[test]
    fn cluster_slots_of_any_ranges_never_panic(
        ranges in proptest::collection::vec((any::<i64>(), any::<i64>(), any::<i64>(), "[a-z0-9.?]{0,6}"), 0..5),
    ) {
        let v = Value::Array(
            ranges
                .iter()
                .map(|(a, b, port, host)| {
                    Value::Array(vec![
                        Value::Int(*a),
                        Value::Int(*b),
                        Value::Array(vec![bulk(host), Value::Int(*port), bulk("id")]),
                    ])
                })
                .collect(),
        );
        let _ = SlotMap::parse(&v, "127.0.0.1");
    }
}
