//! The TCK against the in-process memory backend.
#![cfg(feature = "tck")]

fn harness() -> simba::tck::Harness {
    simba::tck::Harness::new(std::sync::Arc::new(simba::MemoryBackend::new()))
}

mod tck {
    simba::tck_suite!(memory, crate::harness());
}
