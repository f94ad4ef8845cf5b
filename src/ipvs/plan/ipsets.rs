//! kube-proxy's IPVS-mode ipsets: names, types, comments (ipset.go `ipsetInfo`, in that
//! order) and the entry strings (`Entry.String`).

use std::net::IpAddr;

use crate::net::{Cidr, IpFamily};

/// One of kube-proxy's sets. The order is kube-proxy's `ipsetInfo` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetId {
    LoopBack,
    ClusterIp,
    ExternalIp,
    ExternalIpLocal,
    LoadBalancer,
    LoadBalancerFw,
    LoadBalancerLocal,
    LoadBalancerSourceIp,
    LoadBalancerSourceCidr,
    NodePortTcp,
    NodePortLocalTcp,
    NodePortUdp,
    NodePortLocalUdp,
    NodePortSctp,
    NodePortLocalSctp,
    HealthCheckNodePort,
    IpvsIps,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetType {
    HashIp,
    HashIpPort,
    HashIpPortIp,
    HashIpPortNet,
    BitmapPort,
}

impl SetType {
    pub fn as_str(self) -> &'static str {
        match self {
            SetType::HashIp => "hash:ip",
            SetType::HashIpPort => "hash:ip,port",
            SetType::HashIpPortIp => "hash:ip,port,ip",
            SetType::HashIpPortNet => "hash:ip,port,net",
            SetType::BitmapPort => "bitmap:port",
        }
    }

    /// The type `ipset` names `name` (`hash:ip,port`, …), if it is one of these.
    pub fn from_name(name: &str) -> Option<SetType> {
        use SetType::*;
        [HashIp, HashIpPort, HashIpPortIp, HashIpPortNet, BitmapPort].into_iter().find(|t| t.as_str() == name)
    }
}

pub const ALL: [SetId; 17] = [
    SetId::LoopBack,
    SetId::ClusterIp,
    SetId::ExternalIp,
    SetId::ExternalIpLocal,
    SetId::LoadBalancer,
    SetId::LoadBalancerFw,
    SetId::LoadBalancerLocal,
    SetId::LoadBalancerSourceIp,
    SetId::LoadBalancerSourceCidr,
    SetId::NodePortTcp,
    SetId::NodePortLocalTcp,
    SetId::NodePortUdp,
    SetId::NodePortLocalUdp,
    SetId::NodePortSctp,
    SetId::NodePortLocalSctp,
    SetId::HealthCheckNodePort,
    SetId::IpvsIps,
];

impl SetId {
    /// The IPv4 name (kube-proxy's constant).
    pub fn base_name(self) -> &'static str {
        self.spec().0
    }

    pub fn set_type(self) -> SetType {
        self.spec().1
    }

    pub fn comment(self) -> &'static str {
        self.spec().2
    }

    fn spec(self) -> (&'static str, SetType, &'static str) {
        use SetType::*;
        match self {
            SetId::LoopBack => ("KUBE-LOOP-BACK", HashIpPortIp, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"),
            SetId::ClusterIp => ("KUBE-CLUSTER-IP", HashIpPort, "Kubernetes service cluster ip + port for masquerade purpose"),
            SetId::ExternalIp => ("KUBE-EXTERNAL-IP", HashIpPort, "Kubernetes service external ip + port for masquerade and filter purpose"),
            SetId::ExternalIpLocal => ("KUBE-EXTERNAL-IP-LOCAL", HashIpPort, "Kubernetes service external ip + port with externalTrafficPolicy=local"),
            SetId::LoadBalancer => ("KUBE-LOAD-BALANCER", HashIpPort, "Kubernetes service lb portal"),
            SetId::LoadBalancerFw => ("KUBE-LOAD-BALANCER-FW", HashIpPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange"),
            SetId::LoadBalancerLocal => ("KUBE-LOAD-BALANCER-LOCAL", HashIpPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"),
            SetId::LoadBalancerSourceIp => ("KUBE-LOAD-BALANCER-SOURCE-IP", HashIpPortIp, "Kubernetes service load balancer ip + port + source IP for packet filter purpose"),
            SetId::LoadBalancerSourceCidr => ("KUBE-LOAD-BALANCER-SOURCE-CIDR", HashIpPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"),
            SetId::NodePortTcp => ("KUBE-NODE-PORT-TCP", BitmapPort, "Kubernetes nodeport TCP port for masquerade purpose"),
            SetId::NodePortLocalTcp => ("KUBE-NODE-PORT-LOCAL-TCP", BitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local"),
            SetId::NodePortUdp => ("KUBE-NODE-PORT-UDP", BitmapPort, "Kubernetes nodeport UDP port for masquerade purpose"),
            SetId::NodePortLocalUdp => ("KUBE-NODE-PORT-LOCAL-UDP", BitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local"),
            SetId::NodePortSctp => ("KUBE-NODE-PORT-SCTP-HASH", HashIpPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"),
            SetId::NodePortLocalSctp => ("KUBE-NODE-PORT-LOCAL-SCTP-HASH", HashIpPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"),
            SetId::HealthCheckNodePort => ("KUBE-HEALTH-CHECK-NODE-PORT", BitmapPort, "Kubernetes health check node port"),
            SetId::IpvsIps => ("KUBE-IPVS-IPS", HashIp, "Addresses on the ipvs interface"),
        }
    }

    /// The set's name for a family: IPv6 sets are `KUBE-6-…`, cut to 31 characters.
    pub fn name(self, family: IpFamily) -> String {
        set_name(self.base_name(), family)
    }
}

/// kube-proxy's `NewIPSet` renaming.
pub fn set_name(base: &str, family: IpFamily) -> String {
    if !family.is_v6() {
        return base.to_string();
    }
    let mut name = match base.strip_prefix("KUBE-") {
        Some(rest) => format!("KUBE-6-{rest}"),
        None => base.to_string(),
    };
    name.truncate(31);
    name
}

/// The `family` option of a hash set.
pub fn family_option(family: IpFamily) -> &'static str {
    if family.is_v6() {
        "inet6"
    } else {
        "inet"
    }
}

/// `IP,proto:PORT` (hash:ip,port).
pub fn ip_port(ip: &IpAddr, proto: &str, port: u16) -> String {
    format!("{ip},{proto}:{port}")
}

/// `IP,proto:PORT,IP2` (hash:ip,port,ip).
pub fn ip_port_ip(ip: &IpAddr, proto: &str, port: u16, ip2: &IpAddr) -> String {
    format!("{ip},{proto}:{port},{ip2}")
}

/// `IP,proto:PORT,CIDR` (hash:ip,port,net).
pub fn ip_port_net(ip: &IpAddr, proto: &str, port: u16, net: &Cidr) -> String {
    format!("{ip},{proto}:{port},{net}")
}

/// The `ipset create` line kube-proxy's ipset runner issues (hash sets: family, hashsize
/// 1024, maxelem 65536; bitmap:port: range 0-65535).
pub fn create_line(id: SetId, family: IpFamily) -> String {
    let name = id.name(family);
    let ty = id.set_type();
    match ty {
        SetType::BitmapPort => format!("create {name} {} range 0-65535", ty.as_str()),
        _ => format!("create {name} {} family {} hashsize 1024 maxelem 65536", ty.as_str(), family_option(family)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_names_are_renamed_and_cut_to_31() {
        assert_eq!(SetId::ClusterIp.name(IpFamily::V6), "KUBE-6-CLUSTER-IP");
        assert_eq!(SetId::LoadBalancerSourceCidr.name(IpFamily::V6), "KUBE-6-LOAD-BALANCER-SOURCE-CID");
        assert_eq!(SetId::NodePortLocalSctp.name(IpFamily::V6), "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS");
        assert_eq!(SetId::ClusterIp.name(IpFamily::V4), "KUBE-CLUSTER-IP");
    }

    #[test]
    fn entries_use_kube_proxy_formats() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let ip2: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(ip_port(&ip, "tcp", 80), "10.0.0.1,tcp:80");
        assert_eq!(ip_port_ip(&ip, "udp", 53, &ip2), "10.0.0.1,udp:53,10.0.0.2");
        let net = Cidr::parse_sloppy("192.168.0.0/16").unwrap();
        assert_eq!(ip_port_net(&ip, "tcp", 80, &net), "10.0.0.1,tcp:80,192.168.0.0/16");
        assert_eq!(create_line(SetId::NodePortTcp, IpFamily::V4), "create KUBE-NODE-PORT-TCP bitmap:port range 0-65535");
        assert_eq!(
            create_line(SetId::ClusterIp, IpFamily::V6),
            "create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536"
        );
    }
}
