//! What the two readers of rule words share (`parse`: the renderer's words; `listed`: the
//! kernel's): the cursor's steps and the parts of the grammar both spell alike.

use super::parse::decimal;
use crate::nftables::model::family_of_word;
use super::{Concat, Dir, Expected, Match, ParseError, Selector, Stmt, Verdict, Vmap};

pub(super) trait Reader<'a> {
    /// The next token when it is a plain word.
    fn peek(&self) -> Option<&'a str>;
    /// The index of the next token.
    fn at(&self) -> usize;
    fn seek(&mut self, at: usize);
    /// An error naming the token at `at`.
    fn error_at(&self, at: usize, expected: Expected) -> ParseError;

    /// An error at the next word.
    fn error(&self, expected: Expected) -> ParseError {
        self.error_at(self.at(), expected)
    }

    /// The next word (not a quoted string), or `expected` as the error.
    fn word(&mut self, expected: Expected) -> Result<&'a str, ParseError> {
        let w = self.peek().ok_or_else(|| self.error(expected))?;
        self.seek(self.at() + 1);
        Ok(w)
    }

    fn eat(&mut self, w: &str) -> bool {
        let yes = self.peek() == Some(w);
        if yes {
            self.seek(self.at() + 1);
        }
        yes
    }

    fn expect(&mut self, w: &'static str) -> Result<(), ParseError> {
        if self.eat(w) { Ok(()) } else { Err(self.error(Expected::Word(w))) }
    }

    /// Parses the next word with `f`, or fails with `expected` naming it.
    fn value<T>(&mut self, expected: Expected, f: impl FnOnce(&'a str) -> Option<T>) -> Result<T, ParseError> {
        let at = self.at();
        let w = self.word(expected)?;
        f(w).ok_or_else(|| self.error_at(at, expected))
    }

    fn dir(&mut self) -> Result<Dir, ParseError> {
        self.value(Expected::Dir, |w| match w {
            "saddr" => Some(Dir::Saddr),
            "daddr" => Some(Dir::Daddr),
            _ => None,
        })
    }

    /// Whether a key goes on (` . `) or is looked up in a verdict map next.
    fn continues_key(&self) -> bool {
        matches!(self.peek(), Some(".") | Some("vmap"))
    }

    fn selector(&mut self) -> Result<Selector, ParseError> {
        let at = self.at();
        match self.word(Expected::Selector)? {
            w @ ("ip" | "ip6") => Ok(Selector::Addr(family_of_word(w).expect("ip or ip6"), self.dir()?)),
            "meta" => self.expect("l4proto").map(|()| Selector::L4proto),
            "th" => self.expect("dport").map(|()| Selector::ThDport),
            _ => Err(self.error_at(at, Expected::Selector)),
        }
    }

    /// `A . B . C`.
    fn concat(&mut self) -> Result<Concat, ParseError> {
        let first = self.selector()?;
        self.concat_from(first)
    }

    fn concat_from(&mut self, first: Selector) -> Result<Concat, ParseError> {
        let mut parts = vec![first];
        while self.eat(".") {
            parts.push(self.selector()?);
        }
        Ok(Concat(parts))
    }

    /// A key from its first part (taken), then `vmap @MAP` or (two parts or more) `@SET`.
    fn keyed(&mut self, first: Selector) -> Result<Stmt, ParseError> {
        let key = self.concat_from(first)?;
        if self.eat("vmap") {
            return Ok(Stmt::Vmap(Vmap::Named { key, map: self.set_ref()? }));
        }
        let at = self.at();
        let set = self.set_ref()?;
        if key.0.len() < 2 {
            return Err(self.error_at(at, Expected::OneOf(&[".", "vmap"])));
        }
        Ok(Stmt::Match(Match::InSet { key, set }))
    }

    fn set_ref(&mut self) -> Result<String, ParseError> {
        self.value(Expected::SetRef, |w| w.strip_prefix('@').filter(|n| !n.is_empty()).map(str::to_owned))
    }

    /// `random mod N`, after `numgen`.
    fn numgen_mod(&mut self) -> Result<u32, ParseError> {
        self.expect("random")?;
        self.expect("mod")?;
        self.value(Expected::Number, decimal)
    }

    /// A numgen value compared (`== K`): below the modulus, so that it can hold.
    fn numgen_key(&mut self, modulus: u32) -> Result<u32, ParseError> {
        let at = self.at();
        let k: u32 = self.value(Expected::NumgenKey, decimal)?;
        if k >= modulus {
            return Err(self.error_at(at, Expected::NumgenKey));
        }
        Ok(k)
    }

    fn verdict(&mut self) -> Result<Verdict, ParseError> {
        let at = self.at();
        Ok(match self.word(Expected::Verdict)? {
            "accept" => Verdict::Accept,
            "drop" => Verdict::Drop,
            "return" => Verdict::Return,
            "jump" => Verdict::Jump(self.word(Expected::Name)?.to_owned()),
            "goto" => Verdict::Goto(self.word(Expected::Name)?.to_owned()),
            _ => return Err(self.error_at(at, Expected::Verdict)),
        })
    }
}
