//! The socket-LB programs as `build.rs` compiled them (`bpf/socket_lb.c` and
//! `bpf/sock_destroy.c` → `OUT_DIR`), or the reason they are missing: a build without
//! clang still builds svcproxy.

use super::BpfError;

/// The ELF object, aligned as aya's parser needs it.
#[cfg(socket_lb_object)]
pub fn object() -> Result<&'static [u8], BpfError> {
    Ok(aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/socket_lb.o")))
}

/// The socket iterators that close sockets of removed backends (built with the above).
#[cfg(socket_lb_object)]
pub fn destroy_object() -> Result<&'static [u8], BpfError> {
    Ok(aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sock_destroy.o")))
}

/// This binary was built without the object: `--socket-lb` says why and how to fix it.
#[cfg(not(socket_lb_object))]
pub fn object() -> Result<&'static [u8], BpfError> {
    Err(BpfError::NotBuilt)
}

#[cfg(not(socket_lb_object))]
pub fn destroy_object() -> Result<&'static [u8], BpfError> {
    Err(BpfError::NotBuilt)
}

/// Whether this binary carries the programs (tests that need them skip loudly otherwise).
pub fn built() -> bool {
    object().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_is_bpf_elf_or_the_error_names_clang() {
        match object().and_then(|o| Ok((o, destroy_object()?))) {
            // ELF magic, 64-bit, and e_machine EM_BPF (247) at offset 18.
            Ok((a, b)) => {
                for elf in [a, b] {
                    assert_eq!(&elf[..5], b"\x7fELF\x02");
                    assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 247);
                }
            }
            Err(e) => {
                eprintln!("SKIPPED: svcproxy built without clang; checking the error instead");
                assert!(e.to_string().contains("built without clang"), "{e}");
            }
        }
    }
}
