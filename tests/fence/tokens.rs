//! The interleaved tokens of the concurrent `simba::fence` tests (shared by `fence_sql.rs` and
//! `fence_redis.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One writer's tokens: each pick is a new term, the current term (shared with the other
/// writers: the same term keeps writing), or this writer's token of two picks ago (often stale by
/// then), in a fixed rotation that differs per writer.
pub struct Tokens {
    term: Arc<AtomicU64>,
    writer: u64,
    mine: Vec<u64>,
}

impl Tokens {
    /// The tokens of writer `writer`, sharing the term counter `term` (starts at 1).
    pub fn new(term: Arc<AtomicU64>, writer: u64) -> Tokens {
        Tokens { term, writer, mine: vec![1] }
    }

    /// The token of attempt `n`.
    pub fn pick(&mut self, n: u64) -> u64 {
        let token = match (n * 5 + self.writer * 3) % 3 {
            0 => self.term.fetch_add(1, Ordering::SeqCst) + 1,
            1 => self.term.load(Ordering::SeqCst),
            _ => self.mine[self.mine.len().saturating_sub(2)],
        };
        self.mine.push(token);
        token
    }
}
