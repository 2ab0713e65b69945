#![cfg(feature = "mysql")]
