//! Thin strings for the values a ruleset holds by the hundred thousand: a [`Chain`]'s name
//! (shared by every rule of the chain and every jump to it) and a target's value
//! ([`Text`]: a DNAT destination, a mark). Each is one pointer (8 bytes, not a `str`'s 16),
//! and the string's bytes sit in the one allocation it points to, inline when short (every
//! name kube-proxy writes is), so a handle costs no more memory than an `Arc<str>` or a
//! `Box<str>` of the same text. That keeps a [`super::Rule`] at 40 bytes (see the test).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A string's bytes, inline when they fit in `N` (`N` < 256), else on the heap.
#[derive(Clone)]
enum Repr<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Heap(Box<str>),
}

impl<const N: usize> Repr<N> {
    fn new(s: &str) -> Self {
        // The length is kept in a byte; `as_str` relies on it being the whole `s`.
        const { assert!(N < 256) };
        if s.len() > N {
            return Repr::Heap(s.into());
        }
        let mut bytes = [0u8; N];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        // `s.len() <= N < 256`: the length fits a byte.
        Repr::Inline { len: s.len() as u8, bytes }
    }

    #[inline]
    fn as_str(&self) -> &str {
        match self {
            Repr::Inline { len, bytes } => {
                let text = &bytes[..usize::from(*len)];
                debug_assert!(std::str::from_utf8(text).is_ok());
                // SAFETY: `text` is UTF-8. An `Inline` is made only by `Repr::new`, which
                // copies all of a `&str`'s bytes to `bytes[..len]` with `len` its length,
                // and is never changed after (the fields are private to this module, no
                // method takes `&mut self`; a clone copies the bytes as they are).
                // Checking again (`str::from_utf8`) on every read was a large share of
                // writing a restore text (BENCHMARKS.md, the restore writer).
                unsafe { std::str::from_utf8_unchecked(text) }
            }
            Repr::Heap(s) => s,
        }
    }
}

/// Inline bytes of a [`Chain`]'s allocation: with the reference counts, 56 bytes, which
/// the allocator serves from the same 64-byte chunk as an `Arc<str>` of a
/// `KUBE-SEP-XXXXXXXXXXXXXXXX` name (iptables allows at most 28 characters).
const CHAIN_INLINE: usize = 38;

/// Inline bytes of a [`Text`]'s allocation: 24 bytes, the same 32-byte chunk as a
/// `Box<str>` of `255.255.255.255:65535`.
const TEXT_INLINE: usize = 22;

/// A chain's name: one pointer, shared by every rule of the chain and every jump to it
/// (cloning counts a reference). Names given as `&'static str` (`KUBE-SERVICES`) are made
/// once per thread and shared after, so a renderer's fixed chains cost no allocation.
#[derive(Clone)]
pub struct Chain(Arc<Repr<CHAIN_INLINE>>);

thread_local! {
    /// [`Chain`]s made from `&'static str`s, by the string's address and length: a static
    /// string never moves, and a program has finitely many.
    static STATIC_CHAINS: std::cell::RefCell<StaticChains> = std::cell::RefCell::new(StaticChains::default());
}

type StaticChains = HashMap<(usize, usize), Chain, BuildHasherDefault<AddressHasher>>;

/// Hashes [`STATIC_CHAINS`]' keys with a rotate, a xor and a multiply per word (rustc's
/// FxHash): SipHash was most of a lookup, and a render looks one up for every rule that
/// names a fixed chain (each endpoint's `-j KUBE-MARK-MASQ`).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|b| self.write_u64(u64::from(*b)));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

impl Chain {
    /// A chain of this name, in a fresh allocation.
    pub fn new(name: &str) -> Chain {
        Chain(Arc::new(Repr::new(name)))
    }

    #[inline]
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The shared chain for a static name.
    #[inline]
    fn interned(name: &'static str) -> Chain {
        let key = (name.as_ptr() as usize, name.len());
        STATIC_CHAINS
            .try_with(|cell| match cell.try_borrow_mut() {
                Ok(mut map) => map.entry(key).or_insert_with(|| Chain::new(name)).clone(),
                Err(_) => Chain::new(name),
            })
            .unwrap_or_else(|_| Chain::new(name))
    }
}

impl From<&'static str> for Chain {
    fn from(s: &'static str) -> Chain {
        Chain::interned(s)
    }
}

impl From<String> for Chain {
    fn from(s: String) -> Chain {
        Chain::new(&s)
    }
}

impl From<&Chain> for Chain {
    fn from(c: &Chain) -> Chain {
        c.clone()
    }
}

impl PartialEq for Chain {
    fn eq(&self, other: &Chain) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_str() == other.as_str()
    }
}

/// A target's value (`10.0.0.1:80`, `0x4000`, `icmp-port-unreachable`): one pointer to
/// one allocation, owned by its target.
#[derive(Clone)]
pub struct Text(Box<Repr<TEXT_INLINE>>);

impl Text {
    pub fn new(s: &str) -> Text {
        Text(Box::new(Repr::new(s)))
    }

    #[inline]
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text::new(s)
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text::new(&s)
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}

/// What both types share: read as a `str`, compared, hashed and ordered as one (so maps
/// keyed by them are looked up by `&str`), printed as one.
macro_rules! as_a_str {
    ($t:ty) => {
        impl Deref for $t {
            type Target = str;
            #[inline]
            fn deref(&self) -> &str {
                self.as_str()
            }
        }

        impl std::borrow::Borrow<str> for $t {
            fn borrow(&self) -> &str {
                self.as_str()
            }
        }

        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl Eq for $t {}

        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl std::hash::Hash for $t {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.as_str().hash(state)
            }
        }

        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &$t) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $t {
            fn cmp(&self, other: &$t) -> std::cmp::Ordering {
                self.as_str().cmp(other.as_str())
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self.as_str(), f)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

as_a_str!(Chain);
as_a_str!(Text);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    const _: () = assert!(size_of::<Chain>() == 8 && size_of::<Text>() == 8 && size_of::<Option<Text>>() == 8);
    const _: () = assert!(size_of::<Repr<CHAIN_INLINE>>() + 16 == 56, "an Arc's counts and the name: one 64-byte chunk");
    const _: () = assert!(size_of::<Repr<TEXT_INLINE>>() == 24, "one 32-byte chunk");

    #[test]
    fn short_and_long_strings_read_back_whole() {
        let long = "K".repeat(300);
        for s in ["", "KUBE-SERVICES", "KUBE-SEP-SXIVWICOYRO3J4NJ", "é ü", &"x".repeat(CHAIN_INLINE), &"y".repeat(CHAIN_INLINE + 1), &long] {
            assert_eq!(Chain::new(s).as_str(), s);
            assert_eq!(Chain::from(s.to_string()), *s);
            assert_eq!(Text::new(s).as_str(), s);
            assert_eq!(Text::from(s.to_string()).to_string(), s);
        }
        assert_eq!(Text::new(&"z".repeat(TEXT_INLINE + 1)).len(), TEXT_INLINE + 1);
    }

    #[test]
    fn a_static_name_is_made_once_per_thread_and_equals_any_copy() {
        let a = Chain::from("KUBE-NODEPORTS");
        let b = Chain::from("KUBE-NODEPORTS");
        assert!(Arc::ptr_eq(&a.0, &b.0), "shared");
        let fresh = Chain::new("KUBE-NODEPORTS");
        assert!(!Arc::ptr_eq(&a.0, &fresh.0));
        assert_eq!(a, fresh, "equal by name, however made");
        assert_eq!(a.cmp(&fresh), std::cmp::Ordering::Equal);
        assert!(Chain::new("A") < Chain::new("B"));
        let mut set = std::collections::HashSet::new();
        set.insert(fresh);
        assert!(set.contains("KUBE-NODEPORTS"), "hashed as its str");
        assert_eq!(format!("{a:?} {a}"), "\"KUBE-NODEPORTS\" KUBE-NODEPORTS");
    }
}
