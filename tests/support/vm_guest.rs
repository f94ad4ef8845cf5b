//! The `ipvs_vm` test binary's guest modes: copied into the VM, it is the socket-closing
//! case's UDP servers and clients (`tests/rigs/ipvs-guest-sockdestroy.sh`), since the
//! guest has no language but dash and no client that reports a socket's own errors.
//!   `__ipvs_vm_serve IP PORT NAME SECONDS`   answers each UDP datagram with NAME
//!   `__ipvs_vm_stream PROCS udp|udp-unconnected IP PORT COUNT`   as the kernel tier's
//!       stream client: joins the cgroup, keeps one socket, sends every 100 ms and prints
//!       `MS ok NAME`, `MS err WHAT` or, after a socket error, `MS reconnect`
//!   `__ipvs_vm_now`   the wall clock in ms (busybox `date` has no `%N`)

use std::io::Write;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

pub const SERVE: &str = "__ipvs_vm_serve";
pub const STREAM: &str = "__ipvs_vm_stream";
pub const NOW: &str = "__ipvs_vm_now";

/// Runs a guest mode and exits if the arguments name one; returns otherwise.
pub fn main_if_requested() {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some(SERVE) => serve(&args[2..]),
        Some(STREAM) => stream(&args[2..]),
        Some(NOW) => {
            println!("{}", now_ms());
            Ok(())
        }
        _ => return,
    };
    match code {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{}: {e}", args[1]);
            std::process::exit(2)
        }
    }
}

fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, String> {
    args.get(i).and_then(|a| a.parse().ok()).ok_or_else(|| format!("argument {}: want {what}, got {:?}", i + 1, args.get(i)))
}

fn serve(args: &[String]) -> Result<(), String> {
    let ip: IpAddr = arg(args, 0, "an IP")?;
    let port: u16 = arg(args, 1, "a port")?;
    let name: String = arg(args, 2, "a name")?;
    let secs: u64 = arg(args, 3, "seconds")?;
    let sock = UdpSocket::bind(SocketAddr::new(ip, port)).map_err(|e| format!("bind {ip}:{port}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(500))).map_err(|e| e.to_string())?;
    let end = Instant::now() + Duration::from_secs(secs);
    let mut buf = [0u8; 512];
    while Instant::now() < end {
        if let Ok((_, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(format!("{name}\n").as_bytes(), from);
        }
    }
    Ok(())
}

fn stream(args: &[String]) -> Result<(), String> {
    let procs: String = arg(args, 0, "a cgroup.procs path")?;
    let mode: String = arg(args, 1, "udp or udp-unconnected")?;
    let dst = SocketAddr::new(arg(args, 2, "an IP")?, arg(args, 3, "a port")?);
    let count: u32 = arg::<u32>(args, 4, "a count")?.min(600);
    if mode != "udp" && mode != "udp-unconnected" {
        return Err(format!("mode {mode}: want udp or udp-unconnected"));
    }
    std::fs::write(&procs, "0").map_err(|e| format!("joining {procs}: {e}"))?;
    let wait = Duration::from_millis(300);
    let any = SocketAddr::new(if dst.is_ipv4() { IpAddr::from([0u8; 4]) } else { IpAddr::from([0u8; 16]) }, 0);
    let open = || -> std::io::Result<UdpSocket> {
        let s = UdpSocket::bind(any)?;
        if mode == "udp" {
            s.connect(dst)?;
        }
        s.set_read_timeout(Some(wait))?;
        Ok(s)
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
        let Some(s) = &sock else {
            say("reconnect".into());
            sock = open().ok();
            continue;
        };
        let mut buf = [0u8; 256];
        let r = if mode == "udp" {
            s.send(b"ping\n").and_then(|_| s.recv(&mut buf))
        } else {
            // The reply must seem to come from the address sent to (recvmsg's reversal).
            s.send_to(b"ping\n", dst).and_then(|_| s.recv_from(&mut buf)).and_then(|(n, from)| match from == dst {
                true => Ok(n),
                false => Err(std::io::Error::other(format!("a reply from {from}, not {dst}"))),
            })
        };
        match r {
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
