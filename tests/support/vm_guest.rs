//! The `ipvs_vm` test binary's guest modes: copied into the VM, it is the socket-closing
//! case's UDP servers and clients (`tests/rigs/ipvs-guest-sockdestroy.sh`), since the
//! guest has no language but dash and no client that reports a socket's own errors.
//!   `__ipvs_vm_serve IP PORT NAME SECONDS`   answers each UDP datagram, and each read of a
//!       TCP connection it keeps open, with NAME
//!   `__ipvs_vm_stream PROCS udp|udp-unconnected|tcp IP PORT COUNT`   the kernel tier's
//!       stream client (`support/stream_client.rs`): joins the cgroup, keeps one socket, sends every 100 ms and prints
//!       `MS ok NAME`, `MS err WHAT` or, after a socket error, `MS reconnect`
//!   `__ipvs_vm_now`   the wall clock in ms (busybox `date` has no `%N`)

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
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
            println!("{}", crate::stream_client::now_ms());
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

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, String> {
    args.get(i).and_then(|a| a.parse().ok()).ok_or_else(|| format!("argument {}: want {what}, got {:?}", i + 1, args.get(i)))
}

fn serve(args: &[String]) -> Result<(), String> {
    let ip: IpAddr = arg(args, 0, "an IP")?;
    let port: u16 = arg(args, 1, "a port")?;
    let name: String = arg(args, 2, "a name")?;
    let secs: u64 = arg(args, 3, "seconds")?;
    let at = SocketAddr::new(ip, port);
    let sock = UdpSocket::bind(at).map_err(|e| format!("bind udp {at}: {e}"))?;
    let listener = TcpListener::bind(at).map_err(|e| format!("bind tcp {at}: {e}"))?;
    let reply = format!("{name}\n");
    let answer = reply.clone();
    // At most 64 connections at once (the case opens one); the process's end closes them.
    std::thread::spawn(move || {
        let open = Arc::new(AtomicU32::new(0));
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            if open.fetch_add(1, Ordering::SeqCst) >= 64 {
                open.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let (answer, open) = (answer.clone(), open.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(answer.as_bytes()).is_err() {
                        break;
                    }
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    sock.set_read_timeout(Some(Duration::from_millis(500))).map_err(|e| e.to_string())?;
    let end = Instant::now() + Duration::from_secs(secs);
    let mut buf = [0u8; 512];
    while Instant::now() < end {
        if let Ok((_, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(reply.as_bytes(), from);
        }
    }
    Ok(())
}

fn stream(args: &[String]) -> Result<(), String> {
    let procs: String = arg(args, 0, "a cgroup.procs path")?;
    let mode: String = arg(args, 1, "udp, udp-unconnected or tcp")?;
    let dst = SocketAddr::new(arg(args, 2, "an IP")?, arg(args, 3, "a port")?);
    let count: u32 = arg::<u32>(args, 4, "a count")?.min(600);
    crate::stream_client::run(&procs, &mode, dst, count, std::time::Duration::from_millis(300))
}
