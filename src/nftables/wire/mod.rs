//! svcproxy's own nf_tables netlink encoder: the `nft -f` text svcproxy's nftables mode
//! writes (kube-proxy's vocabulary) → one netlink batch of the messages nft 1.0.6 sends
//! for it, so the kernel holds, and `nft list` prints, exactly what `nft -f` of the same
//! text gives — without nft's read of the whole table before every run; and the
//! requests and replies of the full sync's name read ([`dump`]). Pure: bytes in and
//! out; [`super::netlink`] sends and receives them.

pub mod anon;
pub mod attr;
pub mod batch;
pub mod canon;
pub mod dump;
pub mod expr;
pub mod nfta;
pub mod tokens;

pub use batch::{encode, encode_named, encode_script, Batch, Unsupported};

pub use super::model::Family;

/// What a table's rules' encoding depends on, by family.
impl Family {
    /// `NFPROTO_IPV4` / `NFPROTO_IPV6` (the message's family).
    pub fn nfproto(self) -> u8 {
        match self {
            Family::Ip => 2,
            Family::Ip6 => 10,
        }
    }

    pub fn addr_len(self) -> u32 {
        match self {
            Family::Ip => 4,
            Family::Ip6 => 16,
        }
    }

    pub fn saddr_off(self) -> u32 {
        match self {
            Family::Ip => 12,
            Family::Ip6 => 8,
        }
    }

    pub fn daddr_off(self) -> u32 {
        match self {
            Family::Ip => 16,
            Family::Ip6 => 24,
        }
    }

    /// nft's `ipv4_addr` / `ipv6_addr` type ids.
    pub fn addr_type_id(self) -> u32 {
        match self {
            Family::Ip => nfta::datatype::IPV4_ADDR,
            Family::Ip6 => nfta::datatype::IPV6_ADDR,
        }
    }

    /// ICMP port unreachable / ICMPv6 port unreachable (what `reject` sends).
    pub fn reject_code(self) -> u8 {
        match self {
            Family::Ip => 3,
            Family::Ip6 => 4,
        }
    }
}
