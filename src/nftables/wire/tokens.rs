//! The words of one `nft -f` line as svcproxy writes them: whitespace-separated words,
//! a double-quoted string as one word (its quotes dropped, marked as quoted).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tok<'a> {
    Word(&'a str),
    Quoted(&'a str),
}

impl<'a> Tok<'a> {
    pub fn word(self) -> Option<&'a str> {
        match self {
            Tok::Word(w) => Some(w),
            Tok::Quoted(_) => None,
        }
    }
}

/// `None` when a quote is not closed.
pub fn split(line: &str) -> Option<Vec<Tok<'_>>> {
    let mut out = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"')?;
            out.push(Tok::Quoted(&q[..end]));
            rest = q[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push(Tok::Word(&rest[..end]));
            rest = rest[end..].trim_start();
        }
    }
    Some(out)
}

/// A cursor over a line's words.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(toks: Vec<Tok<'a>>) -> Self {
        Cursor { toks, at: 0 }
    }

    pub fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.at).and_then(|t| t.word())
    }

    pub fn word(&mut self) -> Option<&'a str> {
        let w = self.peek()?;
        self.at += 1;
        Some(w)
    }

    pub fn quoted(&mut self) -> Option<&'a str> {
        match self.toks.get(self.at) {
            Some(Tok::Quoted(s)) => {
                self.at += 1;
                Some(s)
            }
            _ => None,
        }
    }

    /// Takes `w` if it is next.
    pub fn eat(&mut self, w: &str) -> bool {
        if self.peek() == Some(w) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    pub fn expect(&mut self, w: &str) -> Option<()> {
        self.eat(w).then_some(())
    }

    pub fn done(&self) -> bool {
        self.at >= self.toks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_strings_are_one_word() {
        let t = split("add rule ip t c reject comment \"a b:c\"").unwrap();
        assert_eq!(t.last(), Some(&Tok::Quoted("a b:c")));
        assert_eq!(t.len(), 8);
        assert!(split("x \"open").is_none());
    }
}
