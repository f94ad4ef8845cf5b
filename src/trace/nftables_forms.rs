//! Statements of kube-proxy's v1.36+ `kube-proxy` table that the nftables tracer reads, in
//! the words svcproxy writes them (a listed table is read back into these words by
//! [`crate::nftables::live`], so the tracer reads one wording):
//!
//! * the masquerade mark: `mark set mark or M` (and `xor`, which clears it), tested by
//!   `mark and M != 0`;
//! * a DNAT: `dnat to IP:PORT`, or one endpoint of several picked at random,
//!   `dnat ip addr . port to numgen random mod N map { 0 : IP . PORT , … }` (`ip6` alike).
//!
//! Pure text → values; what they do to a packet is the tracer's business.

use std::net::IpAddr;

use super::matcher::parse_u32;
use crate::net::join_host_port;

/// A change to the packet's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MarkSet {
    Or(u32),
    Xor(u32),
}

impl MarkSet {
    pub(super) fn apply(self, mark: u32) -> u32 {
        match self {
            MarkSet::Or(v) => mark | v,
            MarkSet::Xor(v) => mark ^ v,
        }
    }
}

/// `mark and MASK OP VALUE`: whether the masked mark equals (`==`) or
/// differs from (`!=`) the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MarkTest {
    mask: u32,
    equal: bool,
    value: u32,
}

impl MarkTest {
    pub(super) fn holds(self, mark: u32) -> bool {
        (mark & self.mask == self.value) == self.equal
    }
}

/// Where a DNAT sends the packet: one `ip:port` (`[ip]:port`), or one of `targets` each
/// with 1/`targets.len()` of the packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Dnat {
    To(String),
    Random(Vec<String>),
}

/// The first word of `s` and the rest after its spaces.
pub(super) fn first_word(s: &str) -> (&str, &str) {
    s.split_once(' ').map_or((s, ""), |(a, b)| (a, b.trim_start()))
}

fn number(word: &str) -> Result<u32, String> {
    parse_u32(word).ok_or_else(|| format!("bad mark value {word:?}"))
}

/// A mark statement at the start of `rest`, and what follows it; `None` when `rest` starts
/// with none.
pub(super) fn mark_set(rest: &str) -> Option<Result<(MarkSet, &str), String>> {
    let r = rest.strip_prefix("mark set mark ")?;
    let (op, r) = first_word(r);
    let (value, after) = first_word(r);
    Some(number(value).and_then(|v| match op {
        "or" => Ok((MarkSet::Or(v), after)),
        "xor" => Ok((MarkSet::Xor(v), after)),
        _ => Err(format!("unknown mark operation {op:?}")),
    }))
}

/// A mark test at the start of `rest`, and what follows it; `None` when `rest` starts with
/// none.
pub(super) fn mark_test(rest: &str) -> Option<Result<(MarkTest, &str), String>> {
    let r = rest.strip_prefix("mark and ")?;
    let (mask, r) = first_word(r);
    let (op, r) = first_word(r);
    let (value, after) = first_word(r);
    let equal = match op {
        "==" => true,
        "!=" => false,
        _ => return Some(Err(format!("unknown mark comparison {op:?}"))),
    };
    Some(number(mask).and_then(|mask| Ok((MarkTest { mask, equal, value: number(value)? }, after))))
}

/// The DNAT after `dnat ` (the whole rest of the rule).
pub(super) fn dnat(rest: &str) -> Result<Dnat, String> {
    let rest = rest.trim();
    if let Some(target) = rest.strip_prefix("to ") {
        return Ok(Dnat::To(target.trim().to_owned()));
    }
    let (family, r) = first_word(rest);
    if family != "ip" && family != "ip6" {
        return Err(format!("unknown DNAT {rest:?}"));
    }
    let r = r.strip_prefix("addr . port to numgen random mod ").ok_or_else(|| format!("unknown DNAT {rest:?}"))?;
    let (modulus, r) = first_word(r);
    let modulus: usize = modulus.parse().map_err(|_| format!("bad numgen modulus {modulus:?}"))?;
    let body = r.strip_prefix("map {").and_then(|b| b.trim_end().strip_suffix('}')).ok_or_else(|| format!("expected map {{ … }} in {rest:?}"))?;
    Ok(Dnat::Random(arms(body, modulus)?))
}

/// `0 : IP . PORT , 1 : …`: the targets in key order; every key below `modulus` once.
fn arms(body: &str, modulus: usize) -> Result<Vec<String>, String> {
    let mut targets: Vec<Option<String>> = vec![None; modulus];
    for arm in body.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let bad = || format!("bad numgen map arm {arm:?}");
        let (key, target) = arm.split_once(" : ").ok_or_else(bad)?;
        let (ip, port) = target.split_once(" . ").ok_or_else(bad)?;
        let ip: IpAddr = ip.trim().parse().map_err(|_| bad())?;
        let port: u16 = port.trim().parse().map_err(|_| bad())?;
        let slot = key.trim().parse::<usize>().ok().and_then(|k| targets.get_mut(k)).ok_or_else(bad)?;
        if slot.replace(join_host_port(&ip, port)).is_some() {
            return Err(bad());
        }
    }
    targets.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| format!("numgen random mod {modulus}: the map does not hold every key"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::live::renderer_words;

    #[test]
    fn marks_as_written_and_as_listed() {
        for (text, op) in [
            ("mark set mark or 0x00004000 comment", MarkSet::Or(0x4000)),
            ("meta mark set meta mark | 0x00004000 comment", MarkSet::Or(0x4000)),
            ("mark set mark xor 0x4000 comment", MarkSet::Xor(0x4000)),
            ("meta mark set meta mark ^ 16384 comment", MarkSet::Xor(0x4000)),
        ] {
            let words = renderer_words(text);
            assert_eq!(mark_set(&words).unwrap().unwrap(), (op, "comment"), "{text}");
        }
        assert_eq!(MarkSet::Xor(0x4000).apply(MarkSet::Or(0x4000).apply(0x1)), 0x1);
        assert!(mark_set("ip daddr 10.0.0.1").is_none());
        assert!(mark_set("mark set mark and 0x4000").unwrap().is_err());
        for (text, marked, unmarked) in [
            ("mark and 0x00004000 != 0 masquerade", true, false),
            ("meta mark & 0x00004000 != 0x00000000 masquerade", true, false),
            ("mark and 0x4000 == 0 masquerade", false, true),
        ] {
            let words = renderer_words(text);
            let (test, after) = mark_test(&words).unwrap().unwrap();
            assert_eq!((test.holds(0x4001), test.holds(0x1), after), (marked, unmarked, "masquerade"), "{text}");
        }
        assert!(mark_test("mark and 0x4000 > 0 x").unwrap().is_err());
    }

    #[test]
    fn dnats_as_written_and_as_listed() {
        // What follows `dnat ` in a rule, listed words read back by `live` first.
        let dnat = |text: &str| {
            let words = renderer_words(&format!("dnat {text}"));
            super::dnat(words.strip_prefix("dnat ").unwrap_or(&words))
        };
        assert_eq!(dnat("to 10.0.0.5:8080"), Ok(Dnat::To("10.0.0.5:8080".into())));
        let two = Dnat::Random(vec!["10.180.0.1:80".into(), "10.180.0.2:80".into()]);
        assert_eq!(dnat("ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 80 , 1 : 10.180.0.2 . 80 }"), Ok(two.clone()));
        assert_eq!(dnat("ip to numgen random mod 2 map { 1 : 10.180.0.2 . 80, 0 : 10.180.0.1 . 80 }"), Ok(two));
        let v6 = Dnat::Random(vec!["[fd00:10:180::1]:80".into(), "[fd00:10:180::2]:80".into()]);
        assert_eq!(dnat("ip6 addr . port to numgen random mod 2 map { 0 : fd00:10:180::1 . 80 , 1 : fd00:10:180::2 . 80 }"), Ok(v6.clone()));
        assert_eq!(dnat("ip6 to numgen random mod 2 map { 0 : fd00:10:180::1 . 80, 1 : fd00:10:180::2 . 80 }"), Ok(v6));
        assert_eq!(dnat("ip addr . port to numgen random mod 1 map { 0 : 10.180.0.1 . 53 }"), Ok(Dnat::Random(vec!["10.180.0.1:53".into()])));
        for bad in [
            "ip to numgen random mod 3 map { 0 : 10.180.0.1 . 80, 1 : 10.180.0.2 . 80 }",
            "ip to numgen random mod 2 map { 0 : 10.180.0.1 . 80, 0 : 10.180.0.2 . 80 }",
            "ip to numgen random mod 1 map { 0 : 10.180.0.1 . 80, 1 : 10.180.0.2 . 80 }",
            "ip to numgen random mod 1 map { 0 : 10.180.0.1:80 }",
            "ip to numgen inc mod 1 map { 0 : 10.180.0.1 . 80 }",
            "inet to 10.0.0.1:80",
        ] {
            assert!(dnat(bad).is_err(), "{bad}");
        }
    }
}
