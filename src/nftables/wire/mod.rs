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

pub use batch::{encode, encode_named, Batch, Unsupported};

/// A table's family, with what its rules' encoding depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fam {
    V4,
    V6,
}

impl Fam {
    /// `NFPROTO_IPV4` / `NFPROTO_IPV6` (the message's family).
    pub fn nfproto(self) -> u8 {
        match self {
            Fam::V4 => 2,
            Fam::V6 => 10,
        }
    }

    pub fn addr_len(self) -> u32 {
        match self {
            Fam::V4 => 4,
            Fam::V6 => 16,
        }
    }

    pub fn saddr_off(self) -> u32 {
        match self {
            Fam::V4 => 12,
            Fam::V6 => 8,
        }
    }

    pub fn daddr_off(self) -> u32 {
        match self {
            Fam::V4 => 16,
            Fam::V6 => 24,
        }
    }

    /// nft's `ipv4_addr` / `ipv6_addr` type ids.
    pub fn addr_type(self) -> u32 {
        match self {
            Fam::V4 => 7,
            Fam::V6 => 8,
        }
    }

    /// ICMP port unreachable / ICMPv6 port unreachable (what `reject` sends).
    pub fn reject_code(self) -> u8 {
        match self {
            Fam::V4 => 3,
            Fam::V6 => 4,
        }
    }
}
