//! Real-kernel tests: network namespaces, veth pairs, real packets, the real
//! `iptables-restore`/`iptables-save` of both backends. A custom harness
//! (`harness = false`) runs the cases, reports `SKIPPED` with the reason when a case
//! cannot run (not root, a tool missing) and counts it; under `CI=true` a skip fails.
//!
//! ```text
//! cargo test --test kernel                      # all cases (root needed, else SKIPPED)
//! cargo test --test kernel -- nft_ --nocapture  # filter by substring, show case logs
//! CI=true cargo test --test kernel              # a SKIPPED case counts as FAILED
//! SVCPROXY_KERNEL_FORCE_SKIP=1 ...              # simulate an unprivileged run
//! SVCPROXY_KERNEL_CASE_TIMEOUT=60 ...           # per-case hard limit (default 120 s)
//! ```
//!
//! Only 198.18.0.0/15 and fd00::/8 are used, only inside namespaces the tests create
//! (no default route anywhere); everything is torn down, also on failure.

// per_backend! pushes cases one by one into a vector made just before; ensure! negates
// the condition it is given (which may compare floats).
#![allow(clippy::vec_init_then_push, clippy::neg_cmp_op_on_partial_ord)]

#[macro_use]
mod harness;
mod netns;

/// `nft_NAME` and `legacy_NAME` cases from a `fn(&mut Ctx, Backend) -> CaseResult`.
macro_rules! per_backend {
    ($v:ident, $($f:ident),+ $(,)?) => {
        $(
            $v.push($crate::harness::Case::new(concat!("nft_", stringify!($f)), |c| $f(c, $crate::netns::Backend::Nft)));
            $v.push($crate::harness::Case::new(concat!("legacy_", stringify!($f)), |c| $f(c, $crate::netns::Backend::Legacy)));
        )+
    };
}


#[path = "../support/apiserver.rs"]
mod apiserver;
mod canary;
mod ctnetlink;
mod dataplane;
mod faults;
mod goldens;
mod incremental;
mod nft_anonfile;
mod nft_chunked;
mod nft_cold;
mod nft_field;
mod nft_goldens;
mod nft_live;
mod nft_live_read;
mod nft_netlink;
mod nft_service_cidrs;
mod nft_mode;
mod node_setup;
mod outside;
mod selftest;
mod socket_lb;
#[path = "../support/stream_client.rs"]
mod stream_client;
mod svcproxy;
mod trace_check;
mod udp_flows;
mod watch_e2e;

use std::time::Duration;

use harness::Options;

fn main() {
    // Connection clients and servers re-execute this binary inside a namespace.
    netns::helper_main_if_requested();
    socket_lb::client_main_if_requested();

    // svcproxy processes the cases start persist nftables mode's anonymous-set cache here,
    // never in the node's /run/svcproxy (set before any thread starts).
    std::env::set_var(::svcproxy::nftables::anonfile::ANON_FILE_ENV, std::env::temp_dir().join(format!("svk-{}", std::process::id())).join("nft-anonymous-sets"));
    let stale = netns::stale_namespaces(harness::env_true("SVCPROXY_KERNEL_SWEEP_STALE"));
    if !stale.is_empty() {
        say!("note: namespaces of dead runs: {} (SVCPROXY_KERNEL_SWEEP_STALE=1 removes them)", stale.join(" "));
    }
    let mut cases = selftest::cases();
    cases.extend(goldens::cases());
    cases.extend(nft_goldens::cases());
    cases.extend(nft_netlink::cases());
    cases.extend(nft_live::cases());
    cases.extend(nft_live_read::cases());
    cases.extend(nft_anonfile::cases());
    cases.extend(dataplane::cases());
    cases.extend(faults::cases());
    cases.extend(watch_e2e::cases());
    cases.extend(incremental::cases());
    cases.extend(trace_check::cases());
    cases.extend(canary::cases());
    cases.extend(node_setup::cases());
    cases.extend(outside::cases());
    cases.extend(nft_mode::cases());
    cases.extend(nft_chunked::cases());
    cases.extend(nft_cold::cases());
    cases.extend(nft_field::cases());
    cases.extend(ctnetlink::cases());
    cases.extend(udp_flows::cases());
    cases.extend(nft_service_cidrs::cases());
    cases.extend(socket_lb::cases());
    let code = harness::run(
        &cases,
        Options {
            suite: "kernel",
            on_timeout: netns::teardown_all_live,
            at_exit: netns::leftovers_at_exit,
            default_timeout: Duration::from_secs(120),
        },
    );
    std::process::exit(code);
}
