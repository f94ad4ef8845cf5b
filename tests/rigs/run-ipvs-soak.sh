#!/usr/bin/env bash
# run-ipvs-soak.sh — the IPVS part of the scale soak (issue 13 item 7): in ONE boot of the
# IPVS VM, `svcproxy sync --watch` follows a generated cluster in IPVS mode, then in
# iptables mode (legacy backend) over the same cluster and the same endpoint changes, and
# IPVS is reported as ratios against iptables.
# Usage: tests/rigs/run-ipvs-soak.sh [SERVICES] [CHANGES] [INTERVAL] [IDLE] [OUT_DIR]
#   defaults: 1000 services x 10 endpoints, 20 changes, one every 5 s, 30 s idle,
#   results in target/ipvs-soak-SERVICES/ (console.txt, samples.tsv, summary.txt).
# The source is a directory of files (big.yaml + a small.yaml replaced by rename at each
# change), not the test API server: the guest has no network device and svcproxy-bench's
# soak drives iptables modes only. So each change->synced time includes the file source's
# poll (200 ms, and 200 ms more to settle) and its re-read of the whole directory, the same
# for both modes; the `synced` line's own seconds are the proxier's sync alone.
# Builds nothing if SVCPROXY_BIN and SVCPROXY_BENCH_BIN name release binaries.
# Env: VM_MEM (MiB, default 3072), VM_TIMEOUT (s, default 1800), SAMPLE (s between RSS samples, 5),
#      CHANGE_TIMEOUT (s a change may wait for its sync, default 300).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-1000} CHANGES=${2:-20} INTERVAL=${3:-5} IDLE=${4:-30}
OUT=${5:-${CARGO_TARGET_DIR:-target}/ipvs-soak-$N}
if [ -z "${SVCPROXY_BIN:-}" ]; then cargo build --release --bin svcproxy; fi
if [ -z "${SVCPROXY_BENCH_BIN:-}" ]; then cargo build --release --features bench --bin svcproxy-bench; fi
bin=${SVCPROXY_BIN:-${CARGO_TARGET_DIR:-target}/release/svcproxy}
bench_bin=${SVCPROXY_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/svcproxy-bench}
D=$(mktemp -d /var/tmp/svcproxy-ipvs-soak.XXXXXX)
trap 'rm -rf "$D"' EXIT
mkdir -p "$OUT"
strip -o "$D/svcproxy" "$bin"
"$bench_bin" generate --services "$N" --endpoints 10 >"$D/big.yaml"
XT=$(ls /usr/lib/x86_64-linux-gnu/xtables/*.so | tr '\n' ' ')
export EXTRA_MODULES="ip_set ip_set_hash_ip ip_set_hash_ipport ip_set_hash_ipportip ip_set_hash_ipportnet ip_set_bitmap_port xt_set ip_tables iptable_nat iptable_filter iptable_mangle xt_comment xt_addrtype xt_mark xt_conntrack xt_MASQUERADE xt_physdev xt_ipvs xt_nat ipt_REJECT xt_statistic xt_recent xt_tcpudp xt_multiport xt_limit"
export EXTRA_FILES="$D/svcproxy $D/big.yaml /etc/protocols /usr/sbin/ipset /usr/sbin/xtables-legacy-multi /usr/sbin/iptables-legacy /usr/sbin/iptables-legacy-save /usr/sbin/iptables-legacy-restore $XT"
export VM_MEM=${VM_MEM:-3072} VM_TIMEOUT=${VM_TIMEOUT:-1800}
[ "$VM_MEM" -le 3072 ] || { echo "run-ipvs-soak: VM_MEM is capped at 3072 MiB" >&2; exit 2; }
set +e
tests/rigs/ipvs-vm.sh tests/rigs/ipvs-guest-soak.sh "$D/svcproxy" "$D" "$CHANGES" "$INTERVAL" "$IDLE" "${SAMPLE:-5}" "${CHANGE_TIMEOUT:-300}" \
  >"$OUT/console.txt" 2>"$OUT/vm.txt"
rc=$?
set -e
cat "$OUT/vm.txt" >&2
grep -v $'^soak\t' "$OUT/console.txt" || true
grep $'^soak\t' "$OUT/console.txt" | cut -f2- >"$OUT/samples.tsv" || true
{
  echo "# run-ipvs-soak: $N services x 10 endpoints, $CHANGES changes every $INTERVAL s, $IDLE s idle; $(date -u +%FT%TZ); vm rc $rc"
  tests/rigs/ipvs-soak-summary.awk "$OUT/samples.tsv"
} | tee "$OUT/summary.txt"
exit "$rc"
