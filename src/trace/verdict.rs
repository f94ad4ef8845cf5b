//! What a rule walk decides for a packet, typed: every mode's tracer records one per
//! branch, and only printing turns it into text (kube-proxy's tracer words: `ACCEPT`,
//! `DROP`, `REJECT`, the DNAT destination, or nothing).

use std::fmt;

use serde::{Serialize, Serializer};

/// What finally happens to a packet on one branch, or what a chain decided for it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Verdict {
    /// No rule decided.
    #[default]
    Undecided,
    Accept,
    Drop,
    Reject,
    /// `-j RETURN` from a built-in chain.
    Return,
    /// `-j MASQUERADE`.
    Masquerade,
    /// The walk went deeper than the tracer follows (a jump loop).
    Loop,
    /// Sent on to this destination (`ip:port` as the rule or the kernel states it): a DNAT
    /// target, or the real server IPVS chose.
    Dnat(String),
}

impl Verdict {
    /// DROP or REJECT: the packet goes no further.
    pub fn stops(&self) -> bool {
        matches!(self, Verdict::Drop | Verdict::Reject)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Undecided => "",
            Verdict::Accept => "ACCEPT",
            Verdict::Drop => "DROP",
            Verdict::Reject => "REJECT",
            Verdict::Return => "RETURN",
            Verdict::Masquerade => "MASQUERADE",
            Verdict::Loop => "LOOP",
            Verdict::Dnat(dest) => dest,
        })
    }
}

/// As its text (the JSON output's `verdict` string).
impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A protocol as the tracer's JSON prints it (`tcp`).
pub(crate) fn serialize_protocol<S: Serializer>(p: &crate::model::Protocol, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.lower())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_kube_proxys_tracer_word() {
        let words: Vec<String> = [Verdict::Undecided, Verdict::Accept, Verdict::Drop, Verdict::Reject, Verdict::Dnat("10.0.0.1:80".into())]
            .iter()
            .map(|v| serde_json::to_string(v).unwrap())
            .collect();
        assert_eq!(words, ["\"\"", "\"ACCEPT\"", "\"DROP\"", "\"REJECT\"", "\"10.0.0.1:80\""]);
        assert!(Verdict::Drop.stops() && Verdict::Reject.stops() && !Verdict::Accept.stops());
    }
}
