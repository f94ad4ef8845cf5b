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

pub use batch::{encode, encode_named, encode_script, Batch, Unsupported};

use crate::net::IpFamily;

/// What a table's rules' encoding depends on, by family (a trait here: `net` knows
/// nothing of nf_tables).
pub trait WireFamily {
    /// `NFPROTO_IPV4` / `NFPROTO_IPV6` (the message's family).
    fn nfproto(self) -> u8;
    fn addr_len(self) -> u32;
    fn saddr_off(self) -> u32;
    fn daddr_off(self) -> u32;
    /// nft's `ipv4_addr` / `ipv6_addr` type ids.
    fn addr_type_id(self) -> u32;
    /// ICMP port unreachable / ICMPv6 port unreachable (what `reject` sends).
    fn reject_code(self) -> u8;
}

impl WireFamily for IpFamily {
    fn nfproto(self) -> u8 {
        by_family(self, 2, 10)
    }

    fn addr_len(self) -> u32 {
        by_family(self, 4, 16)
    }

    fn saddr_off(self) -> u32 {
        by_family(self, 12, 8)
    }

    fn daddr_off(self) -> u32 {
        by_family(self, 16, 24)
    }

    fn addr_type_id(self) -> u32 {
        by_family(self, nfta::datatype::IPV4_ADDR, nfta::datatype::IPV6_ADDR)
    }

    fn reject_code(self) -> u8 {
        by_family(self, 3, 4)
    }
}

fn by_family<T>(family: IpFamily, v4: T, v6: T) -> T {
    match family {
        IpFamily::V4 => v4,
        IpFamily::V6 => v6,
    }
}
