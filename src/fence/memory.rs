//! `fence::Memory`: the fencing rule in process memory.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::{resource_name, FenceError};
use crate::{IntoName, Token};

/// A fence in process memory: per resource, the largest token accepted so far.
///
/// The same rule as the database fences (a larger or equal token is accepted and recorded, a
/// smaller one is [`FenceError::Stale`]), for examples and tests, and for a resource that lives in
/// this process (guard its state with the same lock as the check, or call [`check`](Memory::check)
/// while holding the resource's own lock, so that check and write cannot be separated).
///
/// ```
/// use simba::fence::{FenceError, Memory};
/// use simba::Token;
///
/// let fence = Memory::new();
/// let (t1, t2) = (Token::new(1).unwrap(), Token::new(2).unwrap());
/// fence.check("report", t1).unwrap();
/// fence.check("report", t2).unwrap(); // a new term
/// fence.check("report", t2).unwrap(); // the same term keeps writing
/// let e = fence.check("report", t1).unwrap_err(); // the old holder, back from a pause
/// assert!(matches!(e, FenceError::Stale { seen: Some(s), .. } if s == t2));
/// ```
#[derive(Debug, Default)]
pub struct Memory {
    seen: Mutex<HashMap<String, Token>>,
}

impl Memory {
    /// An empty fence: every resource starts with no token seen.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Accepts `token` for `resource` when it is at least the largest accepted so far, recording
    /// it.
    ///
    /// # Errors
    /// [`FenceError::Stale`] (with `seen`) when a larger token was accepted before; nothing is
    /// recorded. [`FenceError::Invalid`] for a resource name that breaks the naming rule.
    pub fn check(&self, resource: impl IntoName, token: Token) -> Result<(), FenceError> {
        let resource = resource_name(resource)?;
        let mut seen = self.seen.lock();
        match seen.get(resource.as_str()) {
            Some(&max) if max > token => {
                drop(seen);
                Err(FenceError::Stale { resource: resource.to_string(), token, seen: Some(max) })
            }
            Some(&max) if max == token => Ok(()),
            _ => {
                seen.insert(resource.to_string(), token);
                Ok(())
            }
        }
    }

    /// The largest token accepted for `resource`, `None` before the first.
    ///
    /// # Errors
    /// [`FenceError::Invalid`] for a resource name that breaks the naming rule.
    pub fn seen(&self, resource: impl IntoName) -> Result<Option<Token>, FenceError> {
        let resource = resource_name(resource)?;
        Ok(self.seen.lock().get(resource.as_str()).copied())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn t(v: u64) -> Token {
        Token::new(v).unwrap()
    }

    #[test]
    fn larger_and_equal_tokens_are_accepted_smaller_are_stale() {
        let f = Memory::new();
        assert_eq!(f.seen("r").unwrap(), None);
        f.check("r", t(3)).unwrap();
        f.check("r", t(3)).unwrap();
        f.check("r", t(5)).unwrap();
        match f.check("r", t(4)) {
            Err(FenceError::Stale { resource, token, seen }) => {
                assert_eq!((resource.as_str(), token, seen), ("r", t(4), Some(t(5))));
            }
            other => panic!("expected Stale, got {other:?}"),
        }
        assert_eq!(f.seen("r").unwrap(), Some(t(5)), "a stale check records nothing");
        // Resources are independent.
        f.check("other", t(1)).unwrap();
        assert_eq!(f.seen("other").unwrap(), Some(t(1)));
    }

    #[test]
    fn a_bad_resource_name_is_invalid() {
        let f = Memory::new();
        assert!(matches!(f.check("", t(1)), Err(FenceError::Invalid { .. })));
        assert!(matches!(f.seen("a/b"), Err(FenceError::Invalid { .. })));
    }

    #[test]
    fn concurrent_checks_accept_only_a_non_decreasing_sequence() {
        // Four threads with interleaved tokens; each check and its log entry happen under the log
        // lock, so the log is in check order.
        let f = Arc::new(Memory::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..4u64)
            .map(|i| {
                let (f, log) = (f.clone(), log.clone());
                std::thread::spawn(move || {
                    for n in 0..500u64 {
                        let token = t(1 + (n * 7 + i * 13) % 50);
                        let mut log = log.lock();
                        match f.check("r", token) {
                            Ok(()) => log.push(token),
                            Err(FenceError::Stale { seen: Some(seen), .. }) => assert!(seen > token),
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let log = log.lock();
        assert!(log.windows(2).all(|w| w[0] <= w[1]), "accepted tokens went down: {log:?}");
        assert_eq!(f.seen("r").unwrap(), log.last().copied());
    }
}
