//! A text buffer of iptables-restore lines (kube-proxy's `LineBuffer`): arguments joined
//! by single spaces, one rule per line, with a line count.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    text: String,
    count: usize,
}

impl Lines {
    pub fn new() -> Self {
        Lines::default()
    }

    /// Writes one line from its words.
    pub fn line<I, S>(&mut self, words: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut first = true;
        for w in words {
            if !first {
                self.text.push(' ');
            }
            self.text.push_str(w.as_ref());
            first = false;
        }
        self.text.push('\n');
        self.count += 1;
    }

    /// Writes a chain declaration (`:NAME - [0:0]`), which also flushes the chain.
    pub fn chain(&mut self, name: &str) {
        self.text.push(':');
        self.text.push_str(name);
        self.text.push_str(" - [0:0]\n");
        self.count += 1;
    }

    pub fn append(&mut self, other: &Lines) {
        self.text.push_str(&other.text);
        self.count += other.count;
    }

    /// Gives back the growth slack (up to half the buffer) of lines that are kept.
    pub fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.text.lines()
    }
}
