//! The kernel's netfilter interfaces over netlink, shared by every mode: netlink's framing
//! ([`nlattr`]), the conntrack table ([`ctnetlink`]) and the nfacct counters ([`nfacct`]).
//! The socket-LB programs' loader and maps are [`bpf`].
//! (nf_tables' own netlink code is nftables mode's, `nftables::wire`; IPVS's is
//! `ipvs::netlink`; iptables the tool is [`crate::xtables`].)

pub mod bpf;
pub mod ctnetlink;
pub mod nfacct;
pub mod nlattr;
