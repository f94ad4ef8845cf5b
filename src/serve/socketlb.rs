//! `--socket-lb`'s counters at each scrape, read from the programs' pinned `lb_counters`
//! map: what the programs did to sockets, per family and result. Maps that cannot be
//! read (not attached yet, removed) give no sample.

use std::path::{Path, PathBuf};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

use crate::netfilter::bpf::destroy;
use crate::netfilter::bpf::kernel::Maps;
use crate::netfilter::bpf::maps::Counter;

pub const FAMILY: &str = "svcproxy_socket_lb_sockets";
const HELP: &str = "Socket calls the socket-LB programs acted on, by result: translated (a Service address rewritten to a backend's), refused (a Service with no endpoints), slot_missing (a backend slot absent: passed on to the rules), reversed (a reply's or peer's address shown as the Service's), destroyed (a socket connected to a removed backend closed), destroy_failed (the kernel refused to close one)";
pub const SKIPPED_FAMILY: &str = "svcproxy_socket_lb_destroy_skipped";
const SKIPPED_HELP: &str = "Removed (Service, backend) pairs whose sockets were left open: the kernel cannot close sockets (bpf_sock_destroy, Linux 6.5), or the closing failed";

/// The results, as the label spells them, with the counter each is.
const RESULTS: [(&str, Counter); 4] =
    [("translated", Counter::Translated), ("refused", Counter::NoBackend), ("slot_missing", Counter::SlotMissing), ("reversed", Counter::Reversed)];

/// Reads every counter: (IPv6?, result label, value).
pub type Reader = fn(&Path) -> Result<Vec<(bool, &'static str, u64)>, String>;

#[derive(Debug)]
pub struct SocketLbCollector {
    pins: PathBuf,
    read: Reader,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct Labels {
    ip_family: String,
    result: String,
}

fn read_pinned(pins: &Path) -> Result<Vec<(bool, &'static str, u64)>, String> {
    let maps = Maps::open(pins).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for ipv6 in [false, true] {
        for (label, kind) in RESULTS {
            out.push((ipv6, label, maps.counter(ipv6, kind).map_err(|e| e.to_string())?));
        }
    }
    // Pinned once sockets of a removed backend were first closed.
    for (ipv6, destroyed, failed) in destroy::pinned_counts(pins).unwrap_or_default() {
        out.push((ipv6, "destroyed", destroyed));
        out.push((ipv6, "destroy_failed", failed));
    }
    Ok(out)
}

impl SocketLbCollector {
    /// The maps pinned under `pins`.
    pub fn kernel(pins: PathBuf) -> Self {
        SocketLbCollector { pins, read: read_pinned }
    }
}

impl Collector for SocketLbCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples = match (self.read)(&self.pins) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the socket-LB counters; no sample");
                return Ok(());
            }
        };
        let mut metric = encoder.encode_descriptor(FAMILY, HELP, None, prometheus_client::metrics::MetricType::Counter)?;
        for (ipv6, result, value) in samples {
            let labels = Labels { ip_family: if ipv6 { "IPv6" } else { "IPv4" }.to_owned(), result: result.to_owned() };
            let c = ConstCounter::new(value);
            c.encode(metric.encode_family(&labels)?)?;
        }
        let skipped = encoder.encode_descriptor(SKIPPED_FAMILY, SKIPPED_HELP, None, prometheus_client::metrics::MetricType::Counter)?;
        ConstCounter::new(destroy::skipped()).encode(skipped)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(read: Reader) -> String {
        crate::serve::scrape(SocketLbCollector { pins: PathBuf::from("/nonexistent"), read })
    }

    #[test]
    fn each_counter_is_a_sample_by_family_and_result() {
        let out = scrape(|_| Ok(vec![(false, "translated", 48), (true, "refused", 3)]));
        assert!(out.contains("# TYPE svcproxy_socket_lb_sockets counter"), "{out}");
        assert!(out.contains("svcproxy_socket_lb_sockets_total{ip_family=\"IPv4\",result=\"translated\"} 48\n"), "{out}");
        assert!(out.contains("svcproxy_socket_lb_sockets_total{ip_family=\"IPv6\",result=\"refused\"} 3\n"), "{out}");
        assert!(out.contains("# TYPE svcproxy_socket_lb_destroy_skipped counter"), "{out}");
        assert!(out.contains("svcproxy_socket_lb_destroy_skipped_total "), "{out}");
    }

    #[test]
    fn maps_that_cannot_be_read_give_no_sample() {
        let out = scrape(|_| Err("no such file".into()));
        assert!(!out.contains("svcproxy_socket_lb"), "{out}");
        // The real reader on a path with no pins: the same.
        let out = scrape(read_pinned);
        assert!(!out.contains("svcproxy_socket_lb"), "{out}");
    }
}
