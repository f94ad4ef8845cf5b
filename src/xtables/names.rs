//! kube-proxy's iptables chain names, declared once for every mode that writes or reads
//! them (iptables mode, IPVS mode's few rules, the tracer, conntrack, cleanup): the fixed
//! chains, and the per-service ones (a prefix and the first 16 characters of the base32
//! (RFC 4648, upper case) SHA-256 of the service port name and protocol, plus the
//! endpoint for `KUBE-SEP-` chains). The hash is nftables mode's too. IPVS mode's own
//! chains are `ipvs::plan::rules`'.

use data_encoding::BASE32;
use sha2::{Digest, Sha256};

use crate::xtables::Chain;

pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
pub const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
pub const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
pub const KUBE_FIREWALL: &str = "KUBE-FIREWALL";
pub const KUBE_PROXY_CANARY: &str = "KUBE-PROXY-CANARY";

/// Prefixes of the per-service nat chains.
pub const KUBE_SVC: &str = "KUBE-SVC-";
pub const KUBE_SVL: &str = "KUBE-SVL-";
pub const KUBE_EXT: &str = "KUBE-EXT-";
pub const KUBE_FW: &str = "KUBE-FW-";
pub const KUBE_SEP: &str = "KUBE-SEP-";

/// Prefixes of the per-service nat chains; a nat chain with one of them is ours.
pub const SERVICE_CHAIN_PREFIXES: [&str; 5] = [KUBE_SVC, KUBE_SVL, KUBE_EXT, KUBE_FW, KUBE_SEP];

pub fn is_service_chain(name: &str) -> bool {
    SERVICE_CHAIN_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The base32 (RFC 4648, upper case, padded) SHA-256 of the parts joined: kube-proxy's
/// name hash in both modes (iptables keeps 16 characters of it, nftables 8).
pub fn base32_sha256(parts: &[&str]) -> String {
    BASE32.encode(&sha256(parts))
}

fn sha256(parts: &[&str]) -> sha2::digest::Output<Sha256> {
    parts.iter().fold(Sha256::new(), |h, p| h.chain_update(p.as_bytes())).finalize()
}

/// The first 16 characters of [`base32_sha256`]: those of the digest's first 10 bytes
/// (base32 writes 5 bytes as 8 characters), encoded on the stack.
fn hash16(parts: &[&str]) -> [u8; 16] {
    let mut out = [0u8; 16];
    BASE32.encode_mut(&sha256(parts)[..10], &mut out);
    out
}

/// `prefix` and a [`hash16`], in one allocation of their size.
fn prefixed(prefix: &str, hash: &[u8; 16]) -> String {
    let mut s = String::with_capacity(prefix.len() + hash.len());
    s.push_str(prefix);
    // base32 is ASCII.
    s.extend(hash.iter().map(|&b| char::from(b)));
    s
}

/// The four per-service-port chains (they differ only in prefix), each name shared by
/// the rules that name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceChains {
    pub svc: Chain,
    pub svl: Chain,
    pub ext: Chain,
    pub fw: Chain,
}

impl ServiceChains {
    /// `spn` is the service port name string (`ns/name:port`), `proto` lower case.
    pub fn new(spn: &str, proto: &str) -> Self {
        let h = hash16(&[spn, proto]);
        ServiceChains {
            svc: prefixed(KUBE_SVC, &h).into(),
            svl: prefixed(KUBE_SVL, &h).into(),
            ext: prefixed(KUBE_EXT, &h).into(),
            fw: prefixed(KUBE_FW, &h).into(),
        }
    }
}

/// `KUBE-SEP-…` for one endpoint (`ip:port`, or `[ip]:port`).
pub fn endpoint_chain(spn: &str, proto: &str, endpoint: &str) -> String {
    prefixed(KUBE_SEP, &hash16(&[spn, proto, endpoint]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kube_proxy_names() {
        assert_eq!(ServiceChains::new("ns1/svc1:p80", "tcp").svc, "KUBE-SVC-XPGD46QRK7WJZT7O");
        assert_eq!(ServiceChains::new("ns2/svc2:p8080", "tcp").svl, "KUBE-SVL-2VJB64SDSIJUP5T6");
        assert_eq!(ServiceChains::new("default/kubernetes:https", "tcp").svc, "KUBE-SVC-NPX46M4PTMTKRN6Y");
        assert_eq!(endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.1:80"), "KUBE-SEP-SXIVWICOYRO3J4NJ");
    }
}
