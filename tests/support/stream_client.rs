//! The stream client shared by the kernel tier (`tests/kernel/socket_lb.rs`) and the IPVS
//! VM's guest modes (`support/vm_guest.rs`): one socket kept, a line sent every 100 ms,
//! each answer or error printed with the wall clock, so a test can see when a socket
//! moved to another pod.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Milliseconds since the epoch: the clients' lines and the tests' instants on one clock.
pub fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

enum Sock {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// Joins the cgroup `procs`, keeps one `mode` (`udp`, `udp-unconnected` or `tcp`) socket
/// to `dst`, and every 100 ms sends a line and waits (`wait`) for the answer, printing
/// `MS ok POD`, `MS err WHAT` or, after a socket error, `MS reconnect` (a real client's
/// reaction: connect again, which picks a backend anew). Returns after `count` sends;
/// an error only when the mode is unknown or the cgroup cannot be joined.
/// `wait`: how long each answer is waited for (a test that counts every answer on a
/// loaded machine waits longer: a late answer is not a lost one).
pub fn run(procs: &str, mode: &str, dst: SocketAddr, count: u32, wait: Duration) -> Result<(), String> {
    if !["udp", "udp-unconnected", "tcp"].contains(&mode) {
        return Err(format!("mode {mode}: want udp, udp-unconnected or tcp"));
    }
    std::fs::write(procs, "0").map_err(|e| format!("joining {procs}: {e}"))?;
    let any = SocketAddr::new(if dst.is_ipv4() { IpAddr::from([0u8; 4]) } else { IpAddr::from([0u8; 16]) }, 0);
    let open = || -> std::io::Result<Sock> {
        if mode == "tcp" {
            let s = TcpStream::connect_timeout(&dst, wait)?;
            s.set_read_timeout(Some(wait))?;
            return Ok(Sock::Tcp(s));
        }
        let s = UdpSocket::bind(any)?;
        if mode == "udp" {
            s.connect(dst)?;
        }
        s.set_read_timeout(Some(wait))?;
        Ok(Sock::Udp(s))
    };
    let mut out = std::io::stdout().lock();
    let mut say = |line: String| {
        let _ = writeln!(out, "{} {line}", now_ms());
        let _ = out.flush();
    };
    let mut sock = open().ok();
    let start = Instant::now();
    for i in 0..count {
        std::thread::sleep((start + Duration::from_millis(100) * i).saturating_duration_since(Instant::now()));
        let Some(s) = &mut sock else {
            say("reconnect".into());
            sock = open().ok();
            continue;
        };
        let mut buf = [0u8; 256];
        let r = match s {
            Sock::Udp(u) if mode == "udp" => u.send(b"ping\n").and_then(|_| u.recv(&mut buf)),
            // The reply must seem to come from the address sent to (recvmsg's reversal).
            Sock::Udp(u) => u.send_to(b"ping\n", dst).and_then(|_| u.recv_from(&mut buf)).and_then(|(n, from)| match from == dst {
                true => Ok(n),
                false => Err(std::io::Error::other(format!("a reply from {from}, not {dst}"))),
            }),
            Sock::Tcp(t) => t.write_all(b"ping\n").and_then(|_| t.read(&mut buf)),
        };
        match r {
            Ok(0) => {
                say("err closed by the peer".into());
                sock = None;
            }
            Ok(n) => say(format!("ok {}", String::from_utf8_lossy(&buf[..n]).split_whitespace().next().unwrap_or("?"))),
            // A late answer is not a socket error: the next send tries again.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => say(format!("err timeout {e}")),
            Err(e) => {
                say(format!("err {e}"));
                sock = None;
            }
        }
    }
    Ok(())
}
