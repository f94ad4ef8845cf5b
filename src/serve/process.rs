//! The Prometheus process collector's families (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, …), read from `/proc/self` at each scrape, under the
//! names every Prometheus client library uses, so kube-proxy's dashboards (Memory, CPU)
//! show svcproxy. prometheus-client has no process collector; this is the Linux one.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// One scrape's reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: f64,
    pub open_fds: f64,
    pub max_fds: f64,
}

/// Parses `/proc/self/stat` (fields after the command name, which may hold spaces) with
/// the clock tick, the page size and the boot time (`btime` of `/proc/stat`).
pub fn parse_stat(stat: &str, ticks: f64, page: f64, boot_time: f64) -> Option<(f64, f64, f64, f64)> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After "(comm) ": state is field 3, so field N is f[N - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let cpu = (num(14)? + num(15)?) / ticks;
    let start = boot_time + num(22)? / ticks;
    Some((cpu, num(24)? * page, num(23)?, start))
}

fn read() -> Option<Reading> {
    // SAFETY: sysconf only reads a system constant.
    let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK) as f64, libc::sysconf(libc::_SC_PAGESIZE) as f64) };
    let boot = std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    let (cpu_seconds, resident_bytes, virtual_bytes, start_time_seconds) = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?, ticks, page, boot)?;
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as f64;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    let max_fds = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur as f64 } else { 0.0 };
    Some(Reading { cpu_seconds, resident_bytes, virtual_bytes, start_time_seconds, open_fds, max_fds })
}

/// When this process started, in seconds since the epoch (`None` without `/proc`).
pub fn start_time_seconds() -> Option<f64> {
    read().map(|r| r.start_time_seconds)
}

/// Registered once; reads `/proc/self` on every scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(r) = read() else { return Ok(()) };
        let cpu = ConstCounter::new(r.cpu_seconds);
        cpu.encode(encoder.encode_descriptor("process_cpu_seconds", "Total user and system CPU time spent in seconds.", None, cpu.metric_type())?)?;
        for (name, help, value) in [
            ("process_resident_memory_bytes", "Resident memory size in bytes.", r.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes.", r.virtual_bytes),
            ("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", r.start_time_seconds),
            ("process_open_fds", "Number of open file descriptors.", r.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors.", r.max_fds),
        ] {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

/// `process_start_time_seconds` alone, as component-base adds it to the SLI registry.
#[derive(Debug, Default)]
pub struct StartTimeCollector;

impl Collector for StartTimeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(r) = read() else { return Ok(()) };
        let g = ConstGauge::new(r.start_time_seconds);
        g.encode(encoder.encode_descriptor("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", None, g.metric_type())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_even_with_spaces_in_the_command_name() {
        let stat = "4242 (svc proxy) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 123456789 2048 18446744073709551615";
        let (cpu, rss, vsz, start) = parse_stat(stat, 100.0, 4096.0, 1_700_000_000.0).unwrap();
        assert_eq!((cpu, rss, vsz, start), (3.0, 2048.0 * 4096.0, 123_456_789.0, 1_700_000_010.0));
    }

    #[test]
    fn a_scrape_has_the_process_families() {
        let out = crate::serve::scrape(ProcessCollector);
        for family in ["process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_start_time_seconds ", "process_open_fds "] {
            assert!(out.contains(family), "{family} in {out}");
        }
    }
}
