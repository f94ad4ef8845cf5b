//! Rules as values: the chain a rule is appended to and its words after the chain name
//! (matches first, then `-j` and the target's options). Words are kept unquoted; the one
//! writer ([`Rule::write`]) quotes a word that holds a space, as kube-proxy's text does.

use std::fmt;

pub use super::thin::Chain;
use super::target::Target;

/// A rule's words after the chain name, kept in one string, each word ended by a NUL
/// (which no word can hold): one allocation per rule, not per word (a large dump has
/// millions of words).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Args(Box<str>);

impl Args {
    pub fn new<I, S>(words: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        fn join<S: AsRef<str>>(s: &mut String, words: impl IntoIterator<Item = S>) {
            for w in words {
                s.push_str(w.as_ref());
                s.push('\0');
            }
        }
        // The words are joined in a buffer kept by the thread, then copied once at their
        // exact size: a rule costs one allocation, not one per growth of a fresh string
        // (the render makes about a million rules at 10,000 services).
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut s) => {
                s.clear();
                join(&mut s, words);
                Args(Box::from(s.as_str()))
            }
            Err(_) => {
                let mut s = String::new();
                join(&mut s, words);
                Args(s.into_boxed_str())
            }
        })
    }

    pub fn iter(&self) -> Words<'_> {
        Words(&self.0)
    }

    /// The words, borrowed, for code that indexes them.
    pub fn words(&self) -> Vec<&str> {
        self.iter().collect()
    }

    /// The word after the first `flag` (`-j`, `--comment`, …).
    pub fn after(&self, flag: &str) -> Option<&str> {
        word_after(self.iter(), flag)
    }

    /// How many words.
    pub fn len(&self) -> usize {
        self.0.bytes().filter(|b| *b == 0).count()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes the words as restore text: each after a space, quoted when it must be.
    pub fn write(&self, out: &mut String) {
        out.reserve(self.0.len() + 8);
        for w in self.iter() {
            out.push(' ');
            push_quoted(out, w);
        }
    }
}

thread_local! {
    /// [`Args::new`]'s buffer.
    static SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The words of an [`Args`], in order. A byte scan for the NUL that ends each word: the
/// standard `split_terminator('\0')` searches and then compares the separator for every
/// word, which was a tenth of writing a 10,000-service restore text.
#[derive(Clone)]
pub struct Words<'a>(&'a str);

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        let end = self.0.bytes().position(|b| b == 0)?;
        let word = &self.0[..end];
        self.0 = &self.0[end + 1..];
        Some(word)
    }
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Args {
    type Item = &'a str;
    type IntoIter = Words<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The word after the first `flag` in a rule's words (`-j`, `--comment`, …).
pub fn word_after<'a>(words: impl IntoIterator<Item = &'a str>, flag: &str) -> Option<&'a str> {
    let mut it = words.into_iter();
    it.find(|w| *w == flag)?;
    it.next()
}

/// Whether a word must be quoted in restore text (it holds a space, or is empty).
fn needs_quotes(word: &str) -> bool {
    word.is_empty() || word.bytes().any(|b| b == b' ')
}

#[inline]
pub(super) fn push_quoted(out: &mut String, word: &str) {
    if needs_quotes(word) {
        out.push('"');
        out.push_str(word);
        out.push('"');
    } else {
        out.push_str(word);
    }
}

/// Quotes a word the way kube-proxy writes it (only when it has a space).
pub fn quote(word: &str) -> String {
    let mut s = String::with_capacity(word.len() + 2);
    push_quoted(&mut s, word);
    s
}

/// One rule appended to a chain (`-A CHAIN matches… -j TARGET …`): its chain, its match
/// words and its target, as values.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    pub chain: Chain,
    /// The match words (everything before the target).
    pub args: Args,
    pub target: Target,
}

impl Rule {
    pub fn new<I, S>(chain: impl Into<Chain>, matches: I, target: Target) -> Rule
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Rule { chain: chain.into(), args: Args::new(matches), target }
    }

    /// Writes `-A CHAIN words…\n`: the one place a rule becomes restore text.
    pub fn write(&self, out: &mut String) {
        write_line(out, "-A", &self.chain, &self.args, &self.target);
    }

    /// The rule as one restore line, without the newline.
    pub fn to_line(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s.pop();
        s
    }

    /// Bytes of the rule's restore line, near enough to size a buffer.
    pub fn text_len(&self) -> usize {
        self.chain.len() + self.args.0.len() + self.target.text_len() + 8
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line())
    }
}

/// Writes `OP CHAIN matches… target…\n` (`-A`, `-I`, `-D`, …).
pub fn write_line(out: &mut String, op: &str, chain: &str, args: &Args, target: &Target) {
    out.push_str(op);
    out.push(' ');
    out.push_str(chain);
    args.write(out);
    target.write(out);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A render of 10,000 services holds about 400,000 rules: 40 bytes each (a thin chain
    /// name, the match words, the target) is what a rule cost before targets were typed.
    const _: () = assert!(std::mem::size_of::<Rule>() <= 40);

    #[test]
    fn args_keep_every_word_including_empty_ones() {
        let none = Args::new(Vec::<String>::new());
        assert_eq!(none.iter().count(), 0);
        assert!(none.is_empty());
        let one_empty = Args::new([""]);
        assert_eq!(one_empty.words(), vec![""]);
        assert_eq!(one_empty.len(), 1);
        let a = Args::new(["-m", "comment", "--comment", "ns/svc:p cluster IP", "-j", "KUBE-SVC-X", ""]);
        assert_eq!(a.words(), vec!["-m", "comment", "--comment", "ns/svc:p cluster IP", "-j", "KUBE-SVC-X", ""]);
        assert_eq!(a.len(), 7);
        assert_eq!(a.after("--comment"), Some("ns/svc:p cluster IP"));
        assert_eq!(a.after("KUBE-SVC-X"), Some(""));
        assert_eq!(a.after("-p"), None);
        assert_eq!(format!("{a:?}"), format!("{:?}", a.words()));
    }

    #[test]
    fn a_rule_is_written_as_kube_proxy_writes_it() {
        let chain = Chain::from("KUBE-SEP-ABC".to_string());
        let r = Rule::new(&chain, ["-m", "comment", "--comment", "ns/svc:p -> 10.0.0.1:80", "-s", "10.0.0.1"], Target::jump("KUBE-MARK-MASQ"));
        assert_eq!(r.to_line(), "-A KUBE-SEP-ABC -m comment --comment \"ns/svc:p -> 10.0.0.1:80\" -s 10.0.0.1 -j KUBE-MARK-MASQ");
        assert_eq!(r.target.chain(), Some("KUBE-MARK-MASQ"));
        assert_eq!(Target::split(&r.to_line().split(' ').skip(2).collect::<Vec<_>>()).1, r.target);
        let fixed = Rule::new("KUBE-SERVICES", [""; 0], Target::Return);
        assert_eq!(fixed.chain, "KUBE-SERVICES");
        assert_eq!(fixed.chain, Chain::from("KUBE-SERVICES".to_string()), "equal by name, however kept");
        let mut out = String::new();
        fixed.write(&mut out);
        assert_eq!(out, "-A KUBE-SERVICES -j RETURN\n");
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("a b"), "\"a b\"");
        assert_eq!(quote("ab"), "ab");
    }
}
