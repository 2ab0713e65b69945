//! Property tests of what the ZooKeeper backend reads from the server and from its user
//! (issue 15, item 5): session node data, node stats (czxid tokens, ephemeral owners), member
//! paths and child names never panic, and what is written reads back the same; URLs and connect
//! strings are accepted or rejected with a clear error.

use std::time::Duration;

use proptest::prelude::*;

use super::config::ZookeeperUrl;
use super::paths::{decode_session, encode_session, parent, Paths};
use super::{token_of, validate_hosts};
use crate::types::{Name, SessionId};
use crate::ErrorKind;

fn root() -> impl Strategy<Value = String> {
    prop_oneof![Just("/".to_string()), "(/[a-z0-9._-]{1,6}){1,3}"]
}

proptest! {

    #[test]
    fn any_session_node_data_decodes(data in proptest::collection::vec(any::<u8>(), 0..64)) {
        let (remaining, metadata) = decode_session(&data);
        if remaining.is_none() {
            prop_assert_eq!(metadata, String::from_utf8_lossy(&data).into_owned());
        }
    }

    #[test]
    fn session_node_data_round_trips(ms in any::<u64>(), metadata in ".{0,40}") {
        let d = Duration::from_millis(ms);
        prop_assert_eq!(decode_session(&encode_session(d, &metadata)), (Some(d), metadata));
    }

    #[test]
    fn node_stats_give_a_token_or_a_backend_error(czxid in any::<i64>(), owner in any::<i64>()) {
        match token_of(czxid, "lease x") {
            Ok(t) => prop_assert_eq!(i64::try_from(t.get()).ok(), Some(czxid)),
            Err(e) => {
                prop_assert!(czxid <= 0);
                prop_assert_eq!(e.kind(), ErrorKind::Backend);
            }
        }
        // Any ephemeral owner is a session id that parses back to itself.
        let sid = SessionId::from_u64(owner as u64);
        prop_assert_eq!(SessionId::parse(sid.as_str()).unwrap(), sid);
    }

    #[test]
    fn member_paths_parse_back_and_foreign_paths_never_panic(
        root in root(),
        group in "[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,12}",
        owner in any::<u64>(),
        junk in ".{0,40}",
    ) {
        let paths = Paths::new(&root);
        let sid = SessionId::from_u64(owner);
        let group = Name::new(group).unwrap();
        prop_assert_eq!(paths.member_group(&paths.member(&group, &sid), &sid), Some(group.clone()));
        let _ = paths.member_group(&junk, &sid);
        let _ = parent(&junk);
        let (member, group_path) = (paths.member(&group, &sid), paths.group(&group));
        prop_assert_eq!(parent(&member), Some(group_path.as_str()));
    }

    #[test]
    fn child_names_parse_as_session_ids_or_fail_cleanly(child in ".{0,40}") {
        if let Err(e) = SessionId::parse(&child) {
            prop_assert!(e.to_string().contains("hex digits"), "{}", e);
        }
    }

    #[test]
    fn urls_and_connect_strings_never_panic(url in "(zookeeper://)?[a-z0-9.:,@/?#]{0,30}") {
        if let Err(e) = ZookeeperUrl::parse(&url) {
            prop_assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        }
        let _ = validate_hosts(&url, false);
        let _ = validate_hosts(&url, true);
    }

    #[test]
    fn valid_urls_round_trip(
        hosts in proptest::collection::vec(("[a-z][a-z0-9.-]{0,10}", 1u16..), 1..4),
        root in proptest::option::of("(/[a-z0-9._-]{1,6}){1,3}"),
    ) {
        let hosts = hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect::<Vec<_>>().join(",");
        let url = format!("zookeeper://{hosts}{}", root.clone().unwrap_or_default());
        let parsed = ZookeeperUrl::parse(&url).unwrap();
        prop_assert_eq!((parsed.hosts, parsed.root), (hosts, root));
        prop_assert!(parsed.tls.is_none());
    }
}
