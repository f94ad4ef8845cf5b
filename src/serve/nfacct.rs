//! kube-proxy's two nfacct-backed families in iptables mode,
//! `kubeproxy_iptables_ct_state_invalid_dropped_packets_total` and
//! `kubeproxy_iptables_localhost_nodeports_accepted_packets_total`: at each scrape, the
//! packet count of the nfacct counter the rules match. A counter that cannot be read (not
//! created yet, no nfacct in the kernel) gives no sample, as kube-proxy's collector does.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

use crate::netfilter::nfacct::{NFACCT_INVALID_DROPPED, NFACCT_LOCALHOST_NODEPORTS};

/// Reads one counter's packets (`Ok(None)`: it does not exist).
pub type Reader = fn(&str) -> std::io::Result<Option<u64>>;

/// (family, help, nfacct counter), kube-proxy's names and help texts.
pub const FAMILIES: [(&str, &str, &str); 2] = [
    ("kubeproxy_iptables_ct_state_invalid_dropped_packets", "packets dropped by iptables to work around conntrack problems", NFACCT_INVALID_DROPPED),
    ("kubeproxy_iptables_localhost_nodeports_accepted_packets", "Number of packets accepted on nodeports of loopback interface", NFACCT_LOCALHOST_NODEPORTS),
];

#[derive(Debug)]
pub struct NfacctCollector {
    read: Reader,
}

impl NfacctCollector {
    /// Reads the kernel's counters over netfilter netlink.
    pub fn kernel() -> Self {
        NfacctCollector { read: crate::netfilter::nfacct::packets }
    }
}

impl Collector for NfacctCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (family, help, counter) in FAMILIES {
            match (self.read)(counter) {
                Ok(Some(packets)) => {
                    let c = ConstCounter::new(packets);
                    c.encode(encoder.encode_descriptor(family, help, None, c.metric_type())?)?;
                }
                Ok(None) => tracing::debug!(counter, "nfacct counter absent; no sample"),
                Err(e) => tracing::debug!(counter, error = %e, "cannot read nfacct counter; no sample"),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(read: Reader) -> String {
        crate::serve::scrape(NfacctCollector { read })
    }

    #[test]
    fn each_counters_packets_become_its_family() {
        let out = scrape(|name| Ok(Some(if name == NFACCT_INVALID_DROPPED { 42 } else { 7 })));
        assert!(out.contains("# TYPE kubeproxy_iptables_ct_state_invalid_dropped_packets counter"), "{out}");
        assert!(out.contains("kubeproxy_iptables_ct_state_invalid_dropped_packets_total 42\n"), "{out}");
        assert!(out.contains("kubeproxy_iptables_localhost_nodeports_accepted_packets_total 7\n"), "{out}");
    }

    #[test]
    fn a_counter_that_cannot_be_read_gives_no_sample() {
        let out = scrape(|name| if name == NFACCT_INVALID_DROPPED { Ok(None) } else { Err(std::io::Error::from_raw_os_error(95)) });
        assert!(!out.contains("kubeproxy_iptables_"), "{out}");
    }
}
