#![cfg(all(feature = "tck", feature = "mysql"))]
