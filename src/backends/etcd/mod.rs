//! The etcd v3 backend (feature `etcd`): see docs/backends/etcd.md.

mod proto;
