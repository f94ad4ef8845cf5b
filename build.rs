//! Builds the socket-LB programs (`bpf/socket_lb.c`, and the iterators that close sockets
//! of removed backends, `bpf/sock_destroy.c`; docs/socket-lb.md) with clang into
//! `OUT_DIR`; the objects are never checked in. `--socket-lb` is optional, so a machine
//! without clang or libbpf's headers still builds svcproxy: the build says so loudly and
//! leaves `cfg(socket_lb_object)` unset, and `--socket-lb` then fails naming the cause.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Each source and the object it becomes in `OUT_DIR`.
const SOURCES: [(&str, &str); 2] = [("bpf/socket_lb.c", "socket_lb.o"), ("bpf/sock_destroy.c", "sock_destroy.o")];
/// What both sources include (`#include "…"`, found beside them).
const SHARED: &str = "bpf/socket_lb_shared.h";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(socket_lb_object)");
    for (source, _) in SOURCES {
        println!("cargo::rerun-if-changed={source}");
    }
    println!("cargo::rerun-if-changed={SHARED}");
    println!("cargo::rerun-if-env-changed=CLANG");
    println!("cargo::rerun-if-env-changed=SVCPROXY_NO_BPF");
    let dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    match SOURCES.iter().try_for_each(|(source, object)| build(source, &dir.join(object))) {
        Ok(()) => println!("cargo::rustc-cfg=socket_lb_object"),
        Err(why) => {
            println!("cargo::warning=svcproxy is built WITHOUT the socket-LB programs: {why}; --socket-lb will refuse to start");
        }
    }
}

/// Ok when the object was written; Err(why) when this machine cannot build it. A source
/// the compiler rejects is not a missing tool: that fails the build.
fn build(source: &str, out: &Path) -> Result<(), String> {
    if std::env::var_os("SVCPROXY_NO_BPF").is_some_and(|v| v == "1") {
        return Err("SVCPROXY_NO_BPF=1".into());
    }
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    match Command::new(&clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err(format!("`{clang}` not found (apt-get install clang libbpf-dev)")),
    }
    // The UAPI headers include <asm/types.h>, which Debian keeps under the multiarch dir.
    let multiarch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86_64-linux-gnu",
        Ok("aarch64") => "aarch64-linux-gnu",
        Ok(other) => return Err(format!("no multiarch include directory known for target arch {other}")),
        Err(_) => return Err("CARGO_CFG_TARGET_ARCH unset".into()),
    };
    let include = format!("/usr/include/{multiarch}");
    for header in ["/usr/include/bpf/bpf_helpers.h", "/usr/include/linux/bpf.h"] {
        if !Path::new(header).exists() {
            return Err(format!("{header} missing (apt-get install libbpf-dev linux-libc-dev)"));
        }
    }
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-I", &include, "-c", source, "-o"])
        .arg(out)
        .status()
        .map_err(|e| format!("running `{clang}`: {e}"))?;
    if !status.success() {
        panic!("{clang} failed on {source} ({status}); set SVCPROXY_NO_BPF=1 to build without the socket-LB programs");
    }
    Ok(())
}
