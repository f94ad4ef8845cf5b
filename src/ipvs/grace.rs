//! The graceful-termination memory IPVS mode keeps between one-shot runs: when each
//! terminating real server started draining, as `PROTO VADDR VPORT RADDR RPORT SINCE`
//! lines in a file.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use super::reconcile::Grace;
use super::values::{Protocol, ServiceKey};

/// Reads the terminating-since memory (`PROTO VADDR VPORT RADDR RPORT SINCE` lines);
/// missing or unreadable means none (each server then starts its bound anew).
pub fn read(path: &Path) -> Grace {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut grace = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [p, va, vp, ra, rp, since] = w.as_slice() else { continue };
        let parsed = (|| {
            let protocol = Protocol::from_number(p.parse().ok()?)?;
            let key = ServiceKey { addr: va.parse::<IpAddr>().ok()?, port: vp.parse().ok()?, protocol };
            Some(((key, ra.parse::<IpAddr>().ok()?, rp.parse::<u16>().ok()?), since.parse::<u64>().ok()?))
        })();
        if let Some((k, v)) = parsed {
            grace.insert(k, v);
        }
    }
    grace
}

/// Writes the memory for the next run (creating its folder).
pub fn write(path: &Path, grace: &Grace) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text: String = grace
        .iter()
        .map(|((k, ra, rp), since)| format!("{} {} {} {ra} {rp} {since}\n", k.protocol.number(), k.addr, k.port))
        .collect();
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_round_trips() {
        let dir = std::env::temp_dir().join(format!("svcproxy-grace-{}", std::process::id()));
        let path = dir.join("g");
        let key = ServiceKey { addr: "10.0.0.1".parse().unwrap(), port: 80, protocol: Protocol::Tcp };
        let grace: Grace = [((key, "10.244.0.1".parse().unwrap(), 8080), 42)].into();
        write(&path, &grace).unwrap();
        assert_eq!(read(&path), grace);
        let _ = std::fs::remove_dir_all(dir);
    }
}
