//! What a rule does when it matches, as a value: the `-j` target and its options. The
//! renderers build these; the parser of the kernel's text ([`super::dump`]) reads the same
//! values back, and every question about a rule's target (where it jumps, whether it
//! rejects, where it DNATs to) is asked of this type, never of the rule's words.
//!
//! Each typed variant stands for exactly one shape of words, so text read and written
//! back is unchanged; any other target (one kube-proxy does not write, or options we do not
//! model) is kept as its words ([`Target::Other`]).

use std::fmt;

use super::rule::{push_quoted, Args, Chain};
use super::thin::Text;

/// A rule's target. 16 bytes: a tag and one pointer. The name of a chain jumped to is
/// shared with the chain's other uses; a value is a thin [`Text`] (one allocation, as a
/// `Box<str>` was); the rare target kept as words is boxed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// No `-j`: the rule only counts, and the packet goes on to the next rule.
    Continue,
    /// `-j CHAIN`: a user chain. A target extension written without options (`-j
    /// NOTRACK`) reads as this too: the text cannot tell the two apart.
    Jump(Chain),
    /// `-j ACCEPT`
    Accept,
    /// `-j DROP`
    Drop,
    /// `-j RETURN`
    Return,
    /// `-j REJECT [--reject-with TYPE]`
    Reject(Option<Text>),
    /// `-j MARK --or-mark VALUE`
    OrMark(Text),
    /// `-j MARK --xor-mark VALUE`
    XorMark(Text),
    /// `-j MARK --set-xmark VALUE/MASK` (how `iptables-save` prints every MARK above)
    SetXmark(Text),
    /// `-j MASQUERADE [--random-fully]`
    Masquerade { random_fully: bool },
    /// `-j DNAT --to-destination ADDRESS`
    Dnat(Text),
    /// Any other target, as its words from `-j` (or `-g`) on.
    Other(Box<Args>),
}

impl Target {
    /// A jump to `chain`.
    pub fn jump(chain: impl Into<Chain>) -> Target {
        Target::Jump(chain.into())
    }

    /// The target of a rule's words from its `-j` on (empty: [`Target::Continue`]).
    /// `chain` gives the [`Chain`] for a name jumped to (a parser shares it with the
    /// chain's declaration).
    pub fn parse(words: &[&str], chain: impl FnOnce(&str) -> Chain) -> Target {
        let boxed = Text::new;
        match words {
            [] => Target::Continue,
            ["-j", "ACCEPT"] => Target::Accept,
            ["-j", "DROP"] => Target::Drop,
            ["-j", "RETURN"] => Target::Return,
            ["-j", "REJECT"] => Target::Reject(None),
            ["-j", "REJECT", "--reject-with", with] => Target::Reject(Some(boxed(with))),
            ["-j", "MARK", "--or-mark", v] => Target::OrMark(boxed(v)),
            ["-j", "MARK", "--xor-mark", v] => Target::XorMark(boxed(v)),
            ["-j", "MARK", "--set-xmark", v] => Target::SetXmark(boxed(v)),
            ["-j", "MASQUERADE"] => Target::Masquerade { random_fully: false },
            ["-j", "MASQUERADE", "--random-fully"] => Target::Masquerade { random_fully: true },
            ["-j", "DNAT", "--to-destination", to] => Target::Dnat(boxed(to)),
            ["-j", name] if !BUILT_IN.contains(name) => Target::Jump(chain(name)),
            _ => Target::Other(Box::new(Args::new(words))),
        }
    }

    /// Splits a rule's words (after the chain name) into its matches (before the first
    /// `-j`/`-g`, long or short) and its target.
    pub fn split<S: AsRef<str>>(words: &[S]) -> (Vec<&str>, Target) {
        let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
        let at = words.iter().position(|w| matches!(*w, "-j" | "--jump" | "-g" | "--goto")).unwrap_or(words.len());
        let target = Target::parse(&words[at..], |name| Chain::from(name.to_string()));
        (words[..at].to_vec(), target)
    }

    /// The chain this target jumps to, if it is a jump.
    pub fn chain(&self) -> Option<&str> {
        match self {
            Target::Jump(c) => Some(c),
            _ => None,
        }
    }

    /// The chain this target jumps to, shared with the rule's value.
    pub fn jump_to(&self) -> Option<&Chain> {
        match self {
            Target::Jump(c) => Some(c),
            _ => None,
        }
    }

    /// The target's name (`ACCEPT`, `MARK`, a chain's name; `None` without `-j`).
    pub fn name(&self) -> Option<&str> {
        Some(match self {
            Target::Continue => return None,
            Target::Jump(c) => c,
            Target::Accept => "ACCEPT",
            Target::Drop => "DROP",
            Target::Return => "RETURN",
            Target::Reject(_) => "REJECT",
            Target::OrMark(_) | Target::XorMark(_) | Target::SetXmark(_) => "MARK",
            Target::Masquerade { .. } => "MASQUERADE",
            Target::Dnat(_) => "DNAT",
            Target::Other(words) => return words.iter().nth(1),
        })
    }

    /// The words this target is written as (`-j`, the name, the options).
    pub fn words(&self) -> Vec<&str> {
        let mut out = Vec::with_capacity(4);
        self.each_word(|w| out.push(w));
        out
    }

    /// Hands each word of [`Target::words`] to `f`, without collecting them: the writer
    /// calls it for every one of a render's million rules.
    pub fn each_word<'a>(&'a self, mut f: impl FnMut(&'a str)) {
        let mut all = |words: &[&'a str]| words.iter().for_each(|w| f(w));
        match self {
            Target::Continue => {}
            Target::Jump(c) => all(&["-j", c]),
            Target::Accept => all(&["-j", "ACCEPT"]),
            Target::Drop => all(&["-j", "DROP"]),
            Target::Return => all(&["-j", "RETURN"]),
            Target::Reject(None) => all(&["-j", "REJECT"]),
            Target::Reject(Some(with)) => all(&["-j", "REJECT", "--reject-with", with]),
            Target::OrMark(v) => all(&["-j", "MARK", "--or-mark", v]),
            Target::XorMark(v) => all(&["-j", "MARK", "--xor-mark", v]),
            Target::SetXmark(v) => all(&["-j", "MARK", "--set-xmark", v]),
            Target::Masquerade { random_fully: false } => all(&["-j", "MASQUERADE"]),
            Target::Masquerade { random_fully: true } => all(&["-j", "MASQUERADE", "--random-fully"]),
            Target::Dnat(to) => all(&["-j", "DNAT", "--to-destination", to]),
            Target::Other(words) => words.iter().for_each(f),
        }
    }

    /// Writes the target as restore text: each word after a space, quoted when it must be.
    pub fn write(&self, out: &mut String) {
        self.each_word(|w| {
            out.push(' ');
            push_quoted(out, w);
        });
    }

    /// Bytes [`Target::write`] writes, near enough to size a buffer.
    pub fn text_len(&self) -> usize {
        let mut n = 0;
        self.each_word(|w| n += w.len() + 1);
        n
    }
}

/// Target names the kernel knows that are never a user chain: a bare `-j NAME` of one of
/// these is not read as a jump.
const BUILT_IN: [&str; 10] = ["ACCEPT", "DROP", "RETURN", "REJECT", "MARK", "MASQUERADE", "DNAT", "SNAT", "LOG", "CT"];

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.words().join(" ").as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Target {
        let words: Vec<&str> = text.split(' ').filter(|w| !w.is_empty()).collect();
        Target::parse(&words, |n| Chain::from(n.to_string()))
    }

    #[test]
    fn every_shape_reads_and_writes_back_the_same_words() {
        let cases = [
            ("", Target::Continue),
            ("-j KUBE-SVC-X", Target::jump("KUBE-SVC-X")),
            ("-j ACCEPT", Target::Accept),
            ("-j DROP", Target::Drop),
            ("-j RETURN", Target::Return),
            ("-j REJECT", Target::Reject(None)),
            ("-j REJECT --reject-with icmp-port-unreachable", Target::Reject(Some("icmp-port-unreachable".into()))),
            ("-j MARK --or-mark 0x4000", Target::OrMark("0x4000".into())),
            ("-j MARK --xor-mark 0x4000", Target::XorMark("0x4000".into())),
            ("-j MARK --set-xmark 0x4000/0x0", Target::SetXmark("0x4000/0x0".into())),
            ("-j MASQUERADE", Target::Masquerade { random_fully: false }),
            ("-j MASQUERADE --random-fully", Target::Masquerade { random_fully: true }),
            ("-j DNAT --to-destination 10.0.0.1:80", Target::Dnat("10.0.0.1:80".into())),
        ];
        for (text, want) in cases {
            let got = parse(text);
            assert_eq!(got, want, "{text}");
            assert_eq!(got.words().join(" "), text);
        }
        for other in ["-j MARK --set-mark 1", "-j LOG --log-prefix x", "-j SNAT --to-source 1.2.3.4", "-g KUBE-X", "-j LOG"] {
            let got = parse(other);
            assert!(matches!(got, Target::Other(_)), "{other}: {got:?}");
            assert_eq!(got.words().join(" "), other, "kept as read");
            assert_eq!(got.chain(), None);
        }
        assert_eq!(parse("-j MARK --set-mark 1").name(), Some("MARK"));
        assert_eq!(parse("-j KUBE-SVC-X").chain(), Some("KUBE-SVC-X"));
        assert_eq!(parse("-j KUBE-SVC-X").name(), Some("KUBE-SVC-X"));
        assert_eq!(Target::Continue.name(), None);
        let mut out = String::new();
        Target::Other(Box::new(Args::new(["-j", "LOG", "--log-prefix", "a b"]))).write(&mut out);
        assert_eq!(out, " -j LOG --log-prefix \"a b\"");
        assert_eq!(out.len(), Target::Other(Box::new(Args::new(["-j", "LOG", "--log-prefix", "a b"]))).text_len() + 2, "quotes aside");
    }

    #[test]
    fn split_cuts_at_the_first_jump() {
        let words = ["-m", "comment", "--comment", "a -j b", "-j", "DNAT", "--to-destination", "10.0.0.1:80"];
        let (matches, target) = Target::split(&words);
        assert_eq!(matches, ["-m", "comment", "--comment", "a -j b"]);
        assert_eq!(target, Target::Dnat("10.0.0.1:80".into()));
        assert_eq!(Target::split(&["-p", "tcp"]).1, Target::Continue);
    }

    /// A tag and one pointer.
    const _: () = assert!(std::mem::size_of::<Target>() == 16);
}
