#![cfg(feature = "postgres")]
