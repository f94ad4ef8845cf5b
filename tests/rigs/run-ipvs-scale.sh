#!/usr/bin/env bash
# run-ipvs-scale.sh — time svcproxy's IPVS sync at scale in the IPVS VM, beside
# `ipvsadm --restore` of the same content. Usage: tests/rigs/run-ipvs-scale.sh [SERVICES] [ENDPOINTS]
# Builds the release binary (glibc; the rig copies its libraries), unless SVCPROXY_BIN names one,
# and svcproxy-bench (which writes the generated cluster), unless SVCPROXY_BENCH_BIN names one.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-10000} E=${2:-10}
if [ -z "${SVCPROXY_BIN:-}" ]; then cargo build --release --bin svcproxy; fi
if [ -z "${SVCPROXY_BENCH_BIN:-}" ]; then cargo build --release --features bench --bin svcproxy-bench; fi
bin=${SVCPROXY_BIN:-${CARGO_TARGET_DIR:-target}/release/svcproxy}
bench_bin=${SVCPROXY_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/svcproxy-bench}
D=/var/tmp/svcproxy-ipvs-scale
rm -rf "$D"; mkdir -p "$D"
strip -o "$D/svcproxy" "$bin"
"$bench_bin" generate --services "$N" --endpoints "$E" >"$D/big.yaml"
# one endpoint changes: the first endpoint address moves
awk '!done && /addresses: \[/ {sub(/addresses: \[[^]]*\]/, "addresses: [10.255.255.254]"); done=1} {print}' "$D/big.yaml" >"$D/big2.yaml"
XT=$(ls /usr/lib/x86_64-linux-gnu/xtables/*.so | tr '\n' ' ')
export EXTRA_MODULES="ip_set ip_set_hash_ip ip_set_hash_ipport ip_set_hash_ipportip ip_set_hash_ipportnet ip_set_bitmap_port xt_set ip_tables iptable_nat iptable_filter xt_comment xt_addrtype xt_mark xt_conntrack xt_MASQUERADE xt_physdev xt_ipvs xt_nat ipt_REJECT"
export EXTRA_FILES="$D/svcproxy $D/big.yaml $D/big2.yaml /etc/protocols /usr/sbin/ipset /usr/sbin/xtables-legacy-multi /usr/sbin/iptables-legacy /usr/sbin/iptables-legacy-save /usr/sbin/iptables-legacy-restore $XT"
export VM_MEM=${VM_MEM:-3072} VM_TIMEOUT=${VM_TIMEOUT:-1200}
exec tests/rigs/ipvs-vm.sh tests/rigs/ipvs-guest-scale.sh "$D/svcproxy" "$D"
