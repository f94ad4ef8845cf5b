//! What `CI` means, for every test tier (and for scripts/test, through
//! tests/support/ci.sh, which says the same in shell; a test in tests/cli.rs checks that
//! the two agree): set to anything but empty, `0` or `false` (any case, spaces ignored)
//! means CI. Under CI a skipped kernel or IPVS-VM case is a failure and goldens are never
//! blessed. Standalone (std only), so `harness = false` tiers include it by path.

#![allow(dead_code)] // each tier uses what it needs

/// Whether this value of `CI` (unset: `None`) means the tests run in CI.
pub fn means_ci(value: Option<&str>) -> bool {
    let v: String = value.unwrap_or_default().chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
    !v.is_empty() && v != "0" && v != "false"
}

/// Whether the tests run in CI (the environment's `CI`).
pub fn under_ci() -> bool {
    means_ci(std::env::var("CI").ok().as_deref())
}

/// Whether goldens are to be written instead of compared: `SVCPROXY_BLESS=1`, refused
/// (a panic) under CI, because goldens are blessed by people, not by CI.
pub fn blessing() -> bool {
    let bless = std::env::var("SVCPROXY_BLESS").is_ok_and(|v| v == "1");
    if bless && under_ci() {
        panic!("SVCPROXY_BLESS is refused when CI is set: goldens are blessed by people, not by CI");
    }
    bless
}
