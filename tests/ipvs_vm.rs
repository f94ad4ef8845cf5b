//! Real IPVS, in one QEMU boot: `tests/rigs/ipvs-vm.sh` boots Debian's kernel (which has
//! `ip_vs` as modules) with the svcproxy binary, the fixtures and the tools in an
//! initramfs, and `tests/rigs/ipvs-guest-sync.sh` runs every check inside: a sync of
//! `fixtures/demo.yaml` compared with `golden/demo.ipvs` (`ipvsadm -Sn`, kube-ipvs0,
//! `ipset save`), a clean dry run, cleanup, and real connections between network
//! namespaces (spread, graceful termination across a restart, affinity), a `--live`
//! trace of the draining state, watch mode, and the checks from outside the node
//! (`dataplane-4.yaml`: an "outside" namespace beside the node: NodePort ETP Cluster and
//! Local, external IP, LoadBalancer IPs in and out of their source ranges, hairpin, the
//! health-check node port), and seeded random change sequences in watch mode, each step
//! checked against a full sync (`walk-SEED-STEP.yaml`, written by [`write_walks`]),
//! and issue 34's IPVS cell (`tests/rigs/ipvs-guest-udp.sh`, in namespaces of its own):
//! a client reusing one UDP source port, answered by the right pod after svcproxy's
//! conntrack reconciler runs (boot race over an un-NATed cached flow, zero -> one
//! endpoint, an endpoint replaced while running, restarts with and without a change).
//!
//! A second, short boot runs issue 38's IPVS cell on Debian's newest 6.12 kernel (the
//! first boot's 6.1 has no `bpf_sock_destroy`; `KERNEL_SERIES` of the rig, fetched with
//! `apt-get download`): `tests/rigs/ipvs-guest-sockdestroy.sh`, with this binary as the
//! guest's UDP servers and clients (`support/vm_guest.rs`), shows the socket-LB programs
//! load there in IPVS mode and that a sync removing a backend closes the connected UDP
//! sockets on it, so connected (v4, v6) and unconnected clients move to the other pod
//! within 1 s, while TCP drains.
//! No such kernel known to apt, or its download failing, is a loud skip of that boot.
//!
//! Missing means (not root, no qemu, no tools) are reported as SKIPPED with the reason,
//! and fail under CI (tests/support/ci.rs). The last line is `ipvs_vm: P passed, F failed, S skipped`.

#[path = "support/ci.rs"]
mod ci;
#[path = "support/stream_client.rs"]
mod stream_client;
#[path = "support/vm_guest.rs"]
mod vm_guest;

use std::path::{Path, PathBuf};

use svcproxy::gen::{self, GenSpec};
use svcproxy::ipvs::walk::Walk;
use std::process::{Command, ExitCode};
use std::time::Instant;

const GUEST_CHECKS: usize = 45;
/// The socket-closing boot: a Debian kernel series with `bpf_sock_destroy` (6.5+), its checks.
const SOCKDESTROY_SERIES: &str = "6.12";
const SOCKDESTROY_CHECKS: usize = 8;

const MODULES: &str = "ip_set ip_set_hash_ip ip_set_hash_ipport ip_set_hash_ipportip ip_set_hash_ipportnet \
    ip_set_bitmap_port xt_set ip_tables iptable_nat iptable_filter ip6_tables ip6table_nat ip6table_filter iptable_mangle ip6table_mangle \
    xt_comment xt_addrtype xt_mark xt_conntrack xt_MASQUERADE xt_physdev xt_ipvs xt_nat ipt_REJECT ip6t_REJECT \
    nf_conntrack_netlink";

/// Host files the guest needs beside the rig's own (ipvsadm, ip, dash, busybox).
const HOST_FILES: [&str; 11] = [
    "/etc/protocols",
    "/usr/bin/socat",
    "/usr/sbin/ipset",
    "/usr/sbin/xtables-legacy-multi",
    "/usr/sbin/iptables-legacy",
    "/usr/sbin/iptables-legacy-save",
    "/usr/sbin/iptables-legacy-restore",
    "/usr/sbin/ip6tables-legacy",
    "/usr/sbin/ip6tables-legacy-save",
    "/usr/sbin/ip6tables-legacy-restore",
    "/usr/sbin/conntrack",
];
const XTABLES: &str = "/usr/lib/x86_64-linux-gnu/xtables";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn has(cmd: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {cmd}")]).output().is_ok_and(|o| o.status.success())
}

/// Why the VM cannot run here, if it cannot.
fn missing_means() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if uid.as_deref().unwrap_or("") != "0" {
        return Some("not root".into());
    }
    for cmd in ["qemu-system-x86_64", "ipvsadm", "cpio", "modprobe", "strip"] {
        if !has(cmd) {
            return Some(format!("{cmd} missing (apt-get install qemu-system-x86 busybox-static ipvsadm kmod cpio binutils)"));
        }
    }
    if !Path::new("/bin/busybox").exists() {
        return Some("/bin/busybox missing (apt-get install busybox-static)".into());
    }
    HOST_FILES.iter().find(|f| !Path::new(f).exists()).map(|f| format!("{f} missing (apt-get install iptables ipset socat conntrack)"))
}

/// The binary for the guest: `SVCPROXY_VM_BIN` (e.g. a release or musl build), else the
/// one cargo built for this test run (glibc; the rig copies its libraries).
fn guest_binary() -> PathBuf {
    std::env::var_os("SVCPROXY_VM_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_svcproxy")), PathBuf::from)
}

/// Copies the binary (stripped: a smaller initramfs boots faster) and the data files
/// into a directory the guest sees at the same path (not /tmp: the guest mounts over it).
fn stage() -> std::io::Result<PathBuf> {
    let dir = PathBuf::from(format!("/var/tmp/svcproxy-ipvs-vm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bin = dir.join("svcproxy");
    let status = Command::new("strip").arg("-o").arg(&bin).arg(guest_binary()).status()?;
    if !status.success() {
        std::fs::copy(guest_binary(), &bin)?;
    }
    let r = repo();
    std::fs::copy(r.join("fixtures/demo.yaml"), dir.join("demo.yaml"))?;
    std::fs::copy(r.join("golden/demo.ipvs"), dir.join("demo.ipvs"))?;
    for i in 1..=4 {
        let name = format!("dataplane-{i}.yaml");
        std::fs::copy(r.join("tests/rigs/ipvs-fixtures").join(&name), dir.join(&name))?;
    }
    // Sourced by ipvs-guest-sync.sh from the data directory.
    std::fs::copy(r.join("tests/rigs/ipvs-guest-udp.sh"), dir.join("ipvs-guest-udp.sh"))?;
    write_walks(&dir)?;
    Ok(dir)
}

/// The socket-closing boot's directory: the stripped svcproxy of `dir`, this test binary
/// (stripped: the guest's servers and clients) and the guest script.
fn stage_sockdestroy(dir: &Path) -> std::io::Result<PathBuf> {
    let sd = PathBuf::from(format!("/var/tmp/svcproxy-ipvs-vm-sd-{}", std::process::id()));
    std::fs::create_dir_all(&sd)?;
    std::fs::copy(dir.join("svcproxy"), sd.join("svcproxy"))?;
    let me = std::env::current_exe()?;
    let client = sd.join("ipvs_vm");
    if !Command::new("strip").arg("-o").arg(&client).arg(&me).status()?.success() {
        std::fs::copy(&me, &client)?;
    }
    std::fs::copy(repo().join("tests/rigs/ipvs-guest-sockdestroy.sh"), sd.join("ipvs-guest-sockdestroy.sh"))?;
    Ok(sd)
}

/// Seeded random change sequences (the ones `ipvs::partial`'s fake-kernel test walks, at
/// other seeds), one file per step: the guest feeds them to watch mode in turn and checks
/// after each that a full sync would change nothing.
const WALK_SEEDS: [u64; 2] = [23, 41];
const WALK_STEPS: usize = 10;

fn write_walks(dir: &Path) -> std::io::Result<()> {
    for seed in WALK_SEEDS {
        let spec = GenSpec { services: 60, endpoints: 3, seed };
        let header = gen::header(&spec);
        let mut walk = Walk::new(spec.services, spec.endpoints, seed);
        for step in 0..=WALK_STEPS {
            if step > 0 {
                walk.step(1 + step % 3);
            }
            let (services, slices) = walk.current();
            std::fs::write(dir.join(format!("walk-{seed:02}-{step:02}.yaml")), gen::state::yaml(&header, services, slices))?;
        }
    }
    Ok(())
}

fn extra_files(dir: &Path) -> String {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path().display().to_string()).collect())
        .unwrap_or_default();
    files.extend(HOST_FILES.iter().map(|s| s.to_string()));
    if let Ok(rd) = std::fs::read_dir(XTABLES) {
        files.extend(rd.filter_map(|e| e.ok()).map(|e| e.path().display().to_string()));
    }
    files.sort();
    files.join(" ")
}

struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
}

/// One boot of the rig: `script` with `args` as the guest's program, the files of `dir`
/// (and the host's tools) copied in. Counts the guest's `ok ` and `FAIL ` lines; a rig
/// skip (exit 77) counts `checks` skipped.
fn run_vm(what: &str, script: &str, args: &[&Path], dir: &Path, env: &[(&str, &str)], checks: usize, t: &mut Tally) {
    let rigs = repo().join("tests/rigs");
    let start = Instant::now();
    let out = Command::new("bash")
        .arg(rigs.join("ipvs-vm.sh"))
        .arg(rigs.join(script))
        .args(args)
        .env("EXTRA_MODULES", MODULES)
        .env("EXTRA_FILES", extra_files(dir))
        .env("VM_MEM", "1024")
        // One boot runs every check: about 5 min under TCG, over 13 min on a host loaded
        // to 5x its cores; the rig's default hard limit is 300 s. An explicit VM_TIMEOUT wins.
        .env("VM_TIMEOUT", std::env::var("VM_TIMEOUT").unwrap_or_else(|_| "1200".into()))
        .env("SKIP_MISSING", "1")
        .envs(env.iter().copied())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            println!("FAIL ipvs_vm {what}: cannot run the rig: {e}");
            t.failed += 1;
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    if out.status.code() == Some(77) {
        println!("SKIPPED ipvs_vm {what} ({checks} checks): the rig is missing a host tool or its kernel (see above)");
        t.skipped += checks;
        return;
    }
    let failed = stdout.lines().filter(|l| l.starts_with("FAIL ")).count();
    t.passed += stdout.lines().filter(|l| l.starts_with("ok ")).count();
    t.failed += failed;
    if !out.status.success() && failed == 0 {
        println!("FAIL ipvs_vm {what}: the VM run failed (exit {:?}) without a failed check", out.status.code());
        t.failed += 1;
    }
    println!("ipvs_vm {what}: one boot, {:.1} s wall time", start.elapsed().as_secs_f64());
}

fn main() -> ExitCode {
    vm_guest::main_if_requested();
    let ci = ci::under_ci();
    let mut t = Tally { passed: 0, failed: 0, skipped: 0 };
    match missing_means() {
        Some(reason) => {
            println!("SKIPPED ipvs_vm ({} checks): {reason}", GUEST_CHECKS + SOCKDESTROY_CHECKS);
            t.skipped += GUEST_CHECKS + SOCKDESTROY_CHECKS;
        }
        None => match stage() {
            Ok(dir) => {
                run_vm("main", "ipvs-guest-sync.sh", &[&dir.join("svcproxy"), &dir], &dir, &[], GUEST_CHECKS, &mut t);
                match stage_sockdestroy(&dir) {
                    Ok(sd) => {
                        // A hang should not hold the tier for the VM's own long timeout.
                        let timeout = std::env::var("VM_TIMEOUT").unwrap_or_else(|_| "600".into());
                        let env = [("KERNEL_SERIES", SOCKDESTROY_SERIES), ("VM_MEM", "768"), ("VM_TIMEOUT", &timeout)];
                        let what = format!("sockdestroy (Debian {SOCKDESTROY_SERIES})");
                        run_vm(&what, "ipvs-guest-sockdestroy.sh", &[&sd.join("svcproxy"), &sd.join("ipvs_vm")], &sd, &env, SOCKDESTROY_CHECKS, &mut t);
                        let _ = std::fs::remove_dir_all(&sd);
                    }
                    Err(e) => {
                        println!("FAIL ipvs_vm sockdestroy: cannot stage the guest files: {e}");
                        t.failed += 1;
                    }
                }
                let _ = std::fs::remove_dir_all(&dir);
            }
            Err(e) => {
                println!("FAIL ipvs_vm: cannot stage the guest files: {e}");
                t.failed += 1;
            }
        },
    }
    if ci && t.skipped > 0 {
        println!("FAIL ipvs_vm: skips are failures under CI");
        t.failed += 1;
    }
    println!("ipvs_vm: {} passed, {} failed, {} skipped", t.passed, t.failed, t.skipped);
    if t.failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
