#!/usr/bin/env bash
# run-vmcheck.sh — build examples/vmcheck for the guest and run it in the IPVS VM.
#
# Usage:  tests/rigs/run-vmcheck.sh [vmcheck flags: --vs 10000 --rs 10 --window 128]
# Builds a static musl binary when the target is installed
# (rustup target add x86_64-unknown-linux-musl), else a glibc one (the rig copies
# its libraries). Exit status: vmcheck's (0 pass, 1 checks failed, 2 could not
# run), or the rig's (77 skipped, 90-92 rig failure; see tests/rigs/ipvs-vm.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export VM_MEM=${VM_MEM:-1024} VM_TIMEOUT=${VM_TIMEOUT:-900}
musl=x86_64-unknown-linux-musl
if rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
  cargo build --release --example vmcheck --target "$musl"
  bin=${CARGO_TARGET_DIR:-target}/$musl/release/examples/vmcheck
else
  echo "run-vmcheck: no $musl target, building for glibc" >&2
  cargo build --release --example vmcheck
  bin=${CARGO_TARGET_DIR:-target}/release/examples/vmcheck
fi
exec tests/rigs/ipvs-vm.sh "$bin" "$@"
