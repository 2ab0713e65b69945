//! Validated value types: names, session ids, tokens and metadata.

use std::borrow::Borrow;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};

/// Longest lease or group name, in characters.
pub const MAX_NAME_LEN: usize = 128;
/// Longest session metadata, in bytes of UTF-8.
pub const MAX_METADATA_LEN: usize = 1024;

/// The prefix of the lease names simba uses for semaphore slots (`simba.sem:<semaphore>:<slot>`,
/// see [`crate::semaphore`]). Lease and group names starting with it are rejected by every
/// session and coordinator call that takes a lease or group name, before any I/O, so no lock,
/// election or group can collide with a permit.
pub const RESERVED_NAME_PREFIX: &str = "simba.sem:";

/// A lease or group name: 1–128 characters of `[A-Za-z0-9._:-]`, not `.` or `..`, case-sensitive.
///
/// The same rule holds on every backend, so a name valid here is valid everywhere (it is a safe
/// ZooKeeper path segment, Redis key part and SQL `ascii_bin` value). Cloning is cheap.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Arc<str>);

impl Name {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidName`] naming the value and the rule it breaks.
    pub fn new(name: impl AsRef<str>) -> Result<Name> {
        let s = name.as_ref();
        validate_name(s)?;
        Ok(Name(Arc::from(s)))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn validate_name(s: &str) -> Result<()> {
    let rule = "names are 1-128 characters of [A-Za-z0-9._:-] and not '.' or '..'";
    let shown: String = s.chars().take(140).collect();
    if s.is_empty() {
        return Err(Error::new(ErrorKind::InvalidName, format!("invalid name '': empty; {rule}")));
    }
    let len = s.chars().count();
    if len > MAX_NAME_LEN {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("invalid name '{shown}…': {len} characters is too long; {rule}"),
        ));
    }
    if let Some(c) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))) {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("invalid name {shown:?}: character {c:?} is not allowed; {rule}"),
        ));
    }
    if s == "." || s == ".." {
        return Err(Error::new(ErrorKind::InvalidName, format!("invalid name '{s}': reserved; {rule}")));
    }
    Ok(())
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Name {
    type Error = Error;
    fn try_from(s: &str) -> Result<Name> {
        Name::new(s)
    }
}

impl TryFrom<String> for Name {
    type Error = Error;
    fn try_from(s: String) -> Result<Name> {
        Name::new(s)
    }
}

impl TryFrom<&String> for Name {
    type Error = Error;
    fn try_from(s: &String) -> Result<Name> {
        Name::new(s)
    }
}

impl TryFrom<&Name> for Name {
    type Error = Error;
    fn try_from(s: &Name) -> Result<Name> {
        Ok(s.clone())
    }
}

/// The prefix of the lease and group names simba uses for partition sets
/// (`simba.part:<set>:<partition>` for a partition's lease, `simba.part:<set>` for the set's
/// member group, see [`crate::partitions`]). Reserved like [`RESERVED_NAME_PREFIX`]: lease, group and
/// semaphore names starting with it are rejected before any I/O.
pub const PARTITION_NAME_PREFIX: &str = "simba.part:";

/// The reserved prefix `name` starts with, and what it is reserved for.
pub(crate) fn reserved_prefix(name: &Name) -> Option<(&'static str, &'static str)> {
    [
        (RESERVED_NAME_PREFIX, "semaphore permits (use Session::semaphore)"),
        (PARTITION_NAME_PREFIX, "partition sets (use Session::partitions)"),
    ]
    .into_iter()
    .find(|(prefix, _)| name.as_str().starts_with(prefix))
}

/// Validates a lease or group name given by the user: the naming rule, and none of the reserved
/// prefixes ([`RESERVED_NAME_PREFIX`], [`PARTITION_NAME_PREFIX`]).
pub(crate) fn user_name(name: impl IntoName) -> Result<Name> {
    let name = name.into_name()?;
    if let Some((prefix, what)) = reserved_prefix(&name) {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("invalid name '{name}': lease and group names starting with '{prefix}' are reserved for {what}"),
        ));
    }
    Ok(name)
}

/// Converts user input to a [`Name`]; implemented for `&str`, `String`, `&String`, `Name`, `&Name`.
pub trait IntoName {
    /// Validates and converts.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidName`] when the value breaks the naming rule.
    fn into_name(self) -> Result<Name>;
}

impl IntoName for Name {
    fn into_name(self) -> Result<Name> {
        Ok(self)
    }
}
impl IntoName for &Name {
    fn into_name(self) -> Result<Name> {
        Ok(self.clone())
    }
}
impl IntoName for &str {
    fn into_name(self) -> Result<Name> {
        Name::new(self)
    }
}
impl IntoName for String {
    fn into_name(self) -> Result<Name> {
        Name::new(self)
    }
}
impl IntoName for &String {
    fn into_name(self) -> Result<Name> {
        Name::new(self)
    }
}

/// A session id: 32 lowercase hex digits (128 random bits) for SQL, Redis and memory; the 16-hex-digit
/// ZooKeeper session id for ZooKeeper.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// A new random 128-bit id as 32 lowercase hex digits.
    pub fn random() -> SessionId {
        // Through the sync facade: `rand`, or in the explorer's build ids that repeat in every
        // execution (a replayed run routes each session to the same Redis Cluster slot).
        let v = crate::sync::random_id();
        SessionId(Arc::from(format!("{v:032x}")))
    }

    /// The id of ZooKeeper session `id`, as 16 lowercase hex digits.
    pub fn from_u64(id: u64) -> SessionId {
        SessionId(Arc::from(format!("{id:016x}")))
    }

    /// Parses an id read back from a backend or from the user: 16 or 32 lowercase hex digits.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] when `s` is not 16 or 32 lowercase hex digits.
    pub fn parse(s: &str) -> Result<SessionId> {
        let ok =
            (s.len() == 32 || s.len() == 16) && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(SessionId(Arc::from(s)))
        } else {
            let shown: String = s.chars().take(40).collect();
            Err(Error::config(format!("invalid session id {shown:?}: expected 16 or 32 lowercase hex digits")))
        }
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A fencing token: > 0, strictly increasing with every new term of a lease, stable within a term,
/// never reset. Pass it to the resource you write and let the resource reject smaller ones.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(NonZeroU64);

impl Token {
    /// `Some` when `v > 0`.
    pub fn new(v: u64) -> Option<Token> {
        NonZeroU64::new(v).map(Token)
    }

    /// Converts a value read from a backend, rejecting 0 and negative values as corrupt data.
    ///
    /// # Errors
    /// [`ErrorKind::Backend`] when `v <= 0`.
    pub fn from_backend(v: i64, what: &str) -> Result<Token> {
        u64::try_from(v)
            .ok()
            .and_then(Token::new)
            .ok_or_else(|| Error::backend(format!("corrupt token {v} for {what}: tokens are > 0")))
    }

    /// The numeric value.
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.0)
    }
}

impl From<Token> for u64 {
    fn from(t: Token) -> u64 {
        t.get()
    }
}

/// Validates session metadata: UTF-8 of at most 1024 bytes.
///
/// # Errors
/// [`ErrorKind::InvalidConfig`] naming the size and the limit.
pub fn validate_metadata(metadata: &str) -> Result<()> {
    if metadata.len() > MAX_METADATA_LEN {
        return Err(Error::config(format!(
            "session metadata is {} bytes; at most {MAX_METADATA_LEN} bytes of UTF-8 are allowed",
            metadata.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "A.b_c:d-e", "...", ".a", &"x".repeat(128), "0"] {
            assert!(Name::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(129), "a\0", "{x}", "*"] {
            let e = Name::new(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad}");
            assert!(e.to_string().contains("[A-Za-z0-9._:-]"), "{e}");
        }
        assert_ne!(Name::new("Job").unwrap(), Name::new("job").unwrap());
    }

    #[test]
    fn reserved_prefix_is_rejected_for_users_only() {
        let e = user_name("simba.sem:x:0").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName);
        assert!(e.to_string().contains("reserved") && e.to_string().contains("simba.sem:"), "{e}");
        assert!(Name::new("simba.sem:x:0").is_ok());
        for ok in ["simba.sem", "simba.semx:1", "x-simba.sem:1", "simba"] {
            assert_eq!(user_name(ok).unwrap().as_str(), ok);
        }
        assert_eq!(user_name("a b").unwrap_err().kind(), ErrorKind::InvalidName);
    }

    #[test]
    fn session_ids() {
        let a = SessionId::random();
        assert_eq!(a.as_str().len(), 32);
        assert_eq!(SessionId::parse(a.as_str()).unwrap(), a);
        assert_eq!(SessionId::from_u64(0x1f).as_str(), "000000000000001f");
        assert!(SessionId::parse("XYZ").is_err());
        assert!(SessionId::parse(&"A".repeat(32)).is_err());
    }

    #[test]
    fn tokens() {
        assert!(Token::new(0).is_none());
        assert!(Token::from_backend(-1, "x").is_err());
        assert_eq!(Token::from_backend(7, "x").unwrap().get(), 7);
        assert!(Token::new(1) < Token::new(2));
    }

    #[test]
    fn metadata() {
        assert!(validate_metadata(&"é".repeat(512)).is_ok());
        assert!(validate_metadata(&"a".repeat(1025)).unwrap_err().to_string().contains("1025 bytes"));
    }
}
