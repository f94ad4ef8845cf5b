//! Rules in the canonical form `iptables-save` prints them, so desired rules can be
//! compared with the kernel's. Learned from iptables 1.8 (nft and legacy print the same):
//! - `[!] -s`, `[!] -d`, `[!] -i`, `[!] -o`, `[!] -p` come first, in that order, and
//!   addresses get a prefix length (`10.0.0.1` → `10.0.0.1/32`);
//! - then every `-m` match in its original order, each with its own options;
//! - marks lose leading zeros (`0x00004000` → `0x4000`); `MARK --or-mark M` becomes
//!   `--set-xmark M/M` and `--xor-mark M` becomes `--set-xmark M/0x0`;
//! - `statistic --probability` is stored as a 31-bit fraction and printed with 11 decimals;
//! - `recent` gains its defaults (`--mask 255.255.255.255 --rsource`) in a fixed order;
//! - `REJECT` gains `--reject-with icmp-port-unreachable` (`icmp6-…` for IPv6).

use super::rule::word_after;
use super::target::Target;
use crate::net::{parse_ip_sloppy, Cidr};

/// One rule, canonical: comparable with `==` against a rule read from `iptables-save`.
pub fn canonical<S: AsRef<str>>(args: &[S], v6: bool) -> Vec<String> {
    let (matches, target) = Target::split(args);
    let mut out = canonical_matches(&matches, v6);
    out.extend(canonical_target(&target, v6).words().into_iter().map(str::to_string));
    out
}

/// A rule's match words (everything before its target), canonical.
pub fn canonical_matches<S: AsRef<str>>(args: &[S], v6: bool) -> Vec<String> {
    let mut header: [Vec<String>; 5] = Default::default();
    let mut matches: Vec<Vec<String>> = Vec::new();
    let mut negate = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_ref();
        let next = args.get(i + 1).map(|n| n.as_ref().to_string()).unwrap_or_default();
        let slot = match a {
            "-s" | "--source" => Some(0),
            "-d" | "--destination" => Some(1),
            "-i" | "--in-interface" => Some(2),
            "-o" | "--out-interface" => Some(3),
            "-p" | "--protocol" => Some(4),
            _ => None,
        };
        if a == "!" {
            negate = true;
            i += 1;
            continue;
        }
        let neg = std::mem::take(&mut negate);
        if let Some(s) = slot {
            let value = if s < 2 { address(&next, v6) } else { next };
            header[s] = if neg { vec!["!".into(), a_short(s).into(), value] } else { vec![a_short(s).into(), value] };
            i += 2;
        } else if a == "-m" || a == "--match" {
            matches.push(vec!["-m".into(), next]);
            i += 2;
        } else {
            if let Some(m) = matches.last_mut() {
                if neg {
                    m.push("!".into());
                }
                m.push(a.to_string());
            }
            i += 1;
        }
    }
    let mut out: Vec<String> = header.into_iter().flatten().collect();
    for m in matches {
        out.extend(canonical_match(m, v6));
    }
    out
}

fn a_short(slot: usize) -> &'static str {
    ["-s", "-d", "-i", "-o", "-p"][slot]
}

fn address(s: &str, v6: bool) -> String {
    if let Some(c) = Cidr::parse_sloppy(s) {
        return c.to_string();
    }
    match parse_ip_sloppy(s) {
        Some(ip) => format!("{ip}/{}", if v6 || ip.is_ipv6() { 128 } else { 32 }),
        None => s.to_string(),
    }
}

/// `0x00004000` → `0x4000`, `0x00004000/0x00004000` → `0x4000/0x4000`.
fn hex(s: &str) -> String {
    s.split('/')
        .map(|p| match u32::from_str_radix(p.trim_start_matches("0x"), 16) {
            Ok(v) => format!("{v:#x}"),
            Err(_) => p.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn value_after(m: &[String], flag: &str) -> Option<String> {
    word_after(m.iter().map(String::as_str), flag).map(str::to_string)
}

fn canonical_match(m: Vec<String>, v6: bool) -> Vec<String> {
    match m[1].as_str() {
        "mark" => m.iter().enumerate().map(|(i, a)| if i > 0 && m[i - 1] == "--mark" { hex(a) } else { a.clone() }).collect(),
        "statistic" => m
            .iter()
            .enumerate()
            .map(|(i, a)| if i > 0 && m[i - 1] == "--probability" { probability(a) } else { a.clone() })
            .collect(),
        "recent" => canonical_recent(&m, v6),
        _ => m,
    }
}

/// xt_statistic keeps `lround(p * 2^31)` and prints it back with `%.11f`.
fn probability(p: &str) -> String {
    match p.parse::<f64>() {
        Ok(v) => {
            let stored = (v * 2147483648.0).round();
            format!("{:.11}", stored / 2147483648.0)
        }
        Err(_) => p.to_string(),
    }
}

fn canonical_recent(m: &[String], v6: bool) -> Vec<String> {
    let mut out = vec!["-m".to_string(), "recent".to_string()];
    for cmd in ["--set", "--rcheck", "--update", "--remove"] {
        if m.iter().any(|a| a == cmd) {
            out.push(cmd.into());
        }
    }
    if let Some(s) = value_after(m, "--seconds") {
        out.extend(["--seconds".into(), s]);
    }
    if m.iter().any(|a| a == "--reap") {
        out.push("--reap".into());
    }
    out.extend(["--name".into(), value_after(m, "--name").unwrap_or_else(|| "DEFAULT".into())]);
    let mask = if v6 { "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff" } else { "255.255.255.255" };
    out.extend(["--mask".into(), value_after(m, "--mask").unwrap_or_else(|| mask.into())]);
    out.push(if m.iter().any(|a| a == "--rdest") { "--rdest" } else { "--rsource" }.into());
    out
}

/// A target as `iptables-save` prints it: `MARK --or-mark M` as `--set-xmark M/M`,
/// `--xor-mark M` as `--set-xmark M/0x0`; `REJECT` with its default `--reject-with`.
pub fn canonical_target(t: &Target, v6: bool) -> Target {
    match t {
        Target::OrMark(v) => {
            let v = hex(v);
            Target::SetXmark(format!("{v}/{v}").into())
        }
        Target::XorMark(v) => Target::SetXmark(format!("{}/0x0", hex(v)).into()),
        Target::Reject(None) => Target::Reject(Some(if v6 { "icmp6-port-unreachable" } else { "icmp-port-unreachable" }.into())),
        _ => t.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::dump::split_words;

    fn canon(s: &str, v6: bool) -> String {
        canonical(&split_words(s).unwrap(), v6).join(" ")
    }

    #[test]
    fn matches_what_iptables_save_prints() {
        // Each pair: our restore input (after `-A CHAIN`), and iptables-save's line (v1.8.9).
        let cases = [
            ("-m comment --comment \"ns/s:p cluster IP\" -m tcp -p tcp -d 10.96.0.1 --dport 443 -j KUBE-SVC-X",
             "-d 10.96.0.1/32 -p tcp -m comment --comment ns/s:p cluster IP -m tcp --dport 443 -j KUBE-SVC-X"),
            ("-m comment --comment c -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
             "! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment c -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"),
            ("-m mark ! --mark 0x00004000/0x00004000 -j RETURN", "-m mark ! --mark 0x4000/0x4000 -j RETURN"),
            ("-j MARK --xor-mark 0x00004000", "-j MARK --set-xmark 0x4000/0x0"),
            ("-j MARK --or-mark 0x00004000", "-j MARK --set-xmark 0x4000/0x4000"),
            ("-m comment --comment c -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-X",
             "-m comment --comment c -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-X"),
            ("-m comment --comment c -m recent --name KUBE-SEP-X --rcheck --seconds 3600 --reap -j KUBE-SEP-X",
             "-m comment --comment c -m recent --rcheck --seconds 3600 --reap --name KUBE-SEP-X --mask 255.255.255.255 --rsource -j KUBE-SEP-X"),
            ("-m comment --comment c -m recent --name KUBE-SEP-X --set -m tcp -p tcp -j DNAT --to-destination 10.0.0.1:80",
             "-p tcp -m comment --comment c -m recent --set --name KUBE-SEP-X --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.0.0.1:80"),
            ("-m comment --comment c -m tcp -p tcp -d 10.0.0.1 --dport 80 -j REJECT",
             "-d 10.0.0.1/32 -p tcp -m comment --comment c -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"),
        ];
        for (ours, saved) in cases {
            assert_eq!(canon(ours, false), saved, "{ours}");
            assert_eq!(canon(saved, false), saved, "canonical form is a fixed point: {saved}");
        }
        assert_eq!(canon("-s fd00::1 -j KUBE-MARK-MASQ", true), "-s fd00::1/128 -j KUBE-MARK-MASQ");
    }
}
