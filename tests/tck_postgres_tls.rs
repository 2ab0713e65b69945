#![cfg(all(feature = "tck", feature = "postgres"))]
