//! The numbers of `linux/netfilter/nf_tables.h` (and the few of nft's own) that the encoder
//! and the readers use, each declared once under the header's name, so no attribute or
//! message is a bare number in the code.

/// `enum nf_tables_msg_types`.
pub mod msg {
    pub const NEWTABLE: u16 = 0;
    pub const GETTABLE: u16 = 1;
    pub const DELTABLE: u16 = 2;
    pub const NEWCHAIN: u16 = 3;
    pub const GETCHAIN: u16 = 4;
    pub const DELCHAIN: u16 = 5;
    pub const NEWRULE: u16 = 6;
    pub const GETRULE: u16 = 7;
    pub const DELRULE: u16 = 8;
    pub const NEWSET: u16 = 9;
    pub const GETSET: u16 = 10;
    pub const DELSET: u16 = 11;
    pub const NEWSETELEM: u16 = 12;
    pub const GETSETELEM: u16 = 13;
    pub const DELSETELEM: u16 = 14;
    pub const NEWGEN: u16 = 15;
    pub const GETGEN: u16 = 16;
    pub const NEWOBJ: u16 = 18;
    pub const GETOBJ: u16 = 19;
    pub const DELOBJ: u16 = 20;
}

/// `NFTA_TABLE_*`.
pub mod table {
    pub const NAME: u16 = 1;
    pub const FLAGS: u16 = 2;
    pub const USERDATA: u16 = 6;
}

/// `NFTA_CHAIN_*`, `NFTA_HOOK_*`.
pub mod chain {
    pub const TABLE: u16 = 1;
    pub const HANDLE: u16 = 2;
    pub const NAME: u16 = 3;
    pub const HOOK: u16 = 4;
    pub const TYPE: u16 = 7;
    pub const USERDATA: u16 = 12;
    pub const HOOK_HOOKNUM: u16 = 1;
    pub const HOOK_PRIORITY: u16 = 2;
}

/// `NFTA_RULE_*`.
pub mod rule {
    pub const TABLE: u16 = 1;
    pub const CHAIN: u16 = 2;
    pub const HANDLE: u16 = 3;
    pub const EXPRESSIONS: u16 = 4;
    pub const USERDATA: u16 = 7;
}

/// `NFTA_SET_*`, `NFT_SET_*` flags, `NFTA_SET_DESC_*`.
pub mod set {
    pub const TABLE: u16 = 1;
    pub const NAME: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const KEY_TYPE: u16 = 4;
    pub const KEY_LEN: u16 = 5;
    pub const DATA_TYPE: u16 = 6;
    pub const DATA_LEN: u16 = 7;
    pub const DESC: u16 = 9;
    pub const ID: u16 = 10;
    pub const TIMEOUT: u16 = 11;
    pub const USERDATA: u16 = 13;
    pub const DESC_SIZE: u16 = 1;

    pub const F_ANONYMOUS: u32 = 0x1;
    pub const F_CONSTANT: u32 = 0x2;
    pub const F_INTERVAL: u32 = 0x4;
    pub const F_MAP: u32 = 0x8;
    pub const F_TIMEOUT: u32 = 0x10;
    pub const F_EVAL: u32 = 0x20;
}

/// `NFTA_SET_ELEM_LIST_*`, `NFTA_SET_ELEM_*`, `NFT_SET_ELEM_*` flags.
pub mod elem {
    pub const LIST_TABLE: u16 = 1;
    pub const LIST_SET: u16 = 2;
    pub const LIST_ELEMENTS: u16 = 3;
    pub const LIST_SET_ID: u16 = 4;
    pub const KEY: u16 = 1;
    pub const DATA: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const USERDATA: u16 = 6;

    pub const F_INTERVAL_END: u32 = 0x1;
}

/// `NFTA_OBJ_*`, `NFT_OBJECT_*`, `NFTA_COUNTER_*`.
pub mod obj {
    pub const TABLE: u16 = 1;
    pub const NAME: u16 = 2;
    pub const TYPE: u16 = 3;
    pub const DATA: u16 = 4;
    pub const COUNTER_BYTES: u16 = 1;
    pub const COUNTER_PACKETS: u16 = 2;

    pub const COUNTER: u32 = 1;
}

/// `NFTA_LIST_ELEM`, `NFTA_EXPR_*`, `NFTA_DATA_*`, `NFTA_VERDICT_*`.
pub mod expr {
    pub const LIST_ELEM: u16 = 1;
    pub const NAME: u16 = 1;
    pub const DATA: u16 = 2;
    pub const DATA_VALUE: u16 = 1;
    pub const DATA_VERDICT: u16 = 2;
    pub const VERDICT_CODE: u16 = 1;
    pub const VERDICT_CHAIN: u16 = 2;
}

/// The registers: the verdict register, and `NFT_REG_1` (the first 16-byte one).
pub mod reg {
    pub const VERDICT: u32 = 0;
    pub const R1: u32 = 1;
    pub const R2: u32 = 2;
}

/// Each expression's attributes and values.
pub mod payload {
    pub const DREG: u16 = 1;
    pub const BASE: u16 = 2;
    pub const OFFSET: u16 = 3;
    pub const LEN: u16 = 4;
    pub const NETWORK_HEADER: u32 = 1;
    pub const TRANSPORT_HEADER: u32 = 2;
}

pub mod cmp {
    pub const SREG: u16 = 1;
    pub const OP: u16 = 2;
    pub const DATA: u16 = 3;
    pub const EQ: u32 = 0;
    pub const NEQ: u32 = 1;
}

pub mod bitwise {
    pub const SREG: u16 = 1;
    pub const DREG: u16 = 2;
    pub const LEN: u16 = 3;
    pub const MASK: u16 = 4;
    pub const XOR: u16 = 5;
    pub const OP: u16 = 6;
    /// `NFT_BITWISE_BOOL` (mask and xor; nft 1.0.6's name: `NFT_BITWISE_MASK_XOR`).
    pub const BOOL: u32 = 0;
}

pub mod meta {
    pub const DREG: u16 = 1;
    pub const KEY: u16 = 2;
    pub const SREG: u16 = 3;
    pub const MARK: u32 = 3;
    pub const IIFNAME: u32 = 6;
    pub const L4PROTO: u32 = 16;
}

pub mod ct {
    pub const DREG: u16 = 1;
    pub const KEY: u16 = 2;
    pub const STATE: u32 = 0;
    pub const STATUS: u32 = 2;
    /// `NF_CT_STATE_BIT(IP_CT_NEW)`.
    pub const STATE_NEW: u32 = 8;
    /// `IPS_DST_NAT`.
    pub const STATUS_DNAT: u32 = 0x20;
}

pub mod immediate {
    pub const DREG: u16 = 1;
    pub const DATA: u16 = 2;
}

pub mod numgen {
    pub const DREG: u16 = 1;
    pub const MODULUS: u16 = 2;
    pub const TYPE: u16 = 3;
    pub const OFFSET: u16 = 4;
    pub const RANDOM: u32 = 1;
}

pub mod lookup {
    pub const SET: u16 = 1;
    pub const SREG: u16 = 2;
    pub const DREG: u16 = 3;
    pub const SET_ID: u16 = 4;
    pub const FLAGS: u16 = 5;
    pub const F_INV: u32 = 1;
}

pub mod fib {
    pub const DREG: u16 = 1;
    pub const RESULT: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const RESULT_ADDRTYPE: u32 = 3;
    pub const F_SADDR: u32 = 1;
    pub const F_DADDR: u32 = 2;
    /// `RTN_LOCAL`, the address type `fib … type local` compares with.
    pub const RTN_LOCAL: u32 = 2;
}

pub mod dynset {
    pub const SET_NAME: u16 = 1;
    pub const SET_ID: u16 = 2;
    pub const OP: u16 = 3;
    pub const SREG_KEY: u16 = 4;
    pub const OP_UPDATE: u32 = 1;
}

pub mod masq {
    pub const FLAGS: u16 = 1;
    /// `NF_NAT_RANGE_PROTO_RANDOM_FULLY`.
    pub const RANDOM_FULLY: u32 = 0x10;
}

pub mod nat {
    pub const TYPE: u16 = 1;
    pub const FAMILY: u16 = 2;
    pub const REG_ADDR_MIN: u16 = 3;
    pub const REG_PROTO_MIN: u16 = 5;
    pub const FLAGS: u16 = 7;
    pub const DNAT: u32 = 1;
    /// `NF_NAT_RANGE_PROTO_SPECIFIED`.
    pub const PROTO_SPECIFIED: u32 = 2;
}

pub mod objref {
    pub const IMM_TYPE: u16 = 1;
    pub const IMM_NAME: u16 = 2;
}

pub mod reject {
    pub const TYPE: u16 = 1;
    pub const ICMP_CODE: u16 = 2;
    /// `NFT_REJECT_ICMP_UNREACH`.
    pub const ICMP_UNREACH: u32 = 0;
}

/// nft's data type ids (`enum datatypes` of nftables' `datatype.h`).
pub mod datatype {
    pub const VERDICT: u32 = 0xffff_ff00;
    pub const INTEGER: u32 = 4;
    pub const IPV4_ADDR: u32 = 7;
    pub const IPV6_ADDR: u32 = 8;
    pub const INET_SERVICE: u32 = 13;
}
