#!/bin/dash
# Guest side of the socket-LB benchmark's IPVS rows (one boot; run by scripts/bench-socketlb-ipvs-vm).
#   ipvs-guest-socketlb.sh BENCH SVCPROXY SERVICES ENDPOINTS SECONDS ROUNDS THREADS SCALING [DIRECT]
# Two labs of the host script's shape (scripts/bench-socketlb), side by side in this boot,
# each a node namespace with a client pod and ENDPOINTS backend pods behind veth pairs:
#   bare  never synced: the floor (no rules) and its direct rate
#   ipvs  one `svcproxy sync --proxy-mode ipvs --socket-lb`, the programs attached to one
#         cgroup (on); its client runs in that cgroup (ipvs+socket-lb) or in a sibling
#         without programs (off: ipvs alone; the node's rules are the same)
# One sync for all rounds: a 10,000-service sync under TCG takes minutes. Rounds interleave
# the three rows. DIRECT (the host script's --direct): per-socket (the default; each socket
# picks a pod at random and keeps it, as the Service does), round-robin (each request to the
# next pod), or both (the direct runs `direct`, per-socket, and `direct-rr`). Prints `slb<TAB>` + the host script's TSV records, `slbnote<TAB>` + facts
# about the kernel, and progress lines.
set -u
B=$1; S=$2; N=$3; E=$4; SECS=$5; ROUNDS=$6; THREADS=$7; SCALING=$8; DIRECT=${9:-per-socket}
say() { echo "socketlb-vm: $(cut -d' ' -f1 /proc/uptime) s: $*"; }
note() { printf 'slbnote\t%s\n' "$*"; }
record() { printf 'slb'; for f in "$@"; do printf '\t%s' "$f"; done; printf '\n'; }
fail() { say "FAILED: $*"; exit 1; }
# The direct runs, NAME:PICK each, the first the one the ratios are to.
case $DIRECT in
  per-socket) DIRECT_RUNS="direct:per-socket" ;;
  round-robin) DIRECT_RUNS="direct:round-robin" ;;
  both) DIRECT_RUNS="direct:per-socket direct-rr:round-robin" ;;
  *) fail "DIRECT: per-socket, round-robin or both, not $DIRECT" ;;
esac
FIRST_PICK=${DIRECT_RUNS%% *}; FIRST_PICK=${FIRST_PICK#*:}

# ---- the kernel: what socket-LB needs -------------------------------------------------
note "kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) vCPU, memory $(awk '/MemTotal/{print $2}' /proc/meminfo) kB"
CG=/tmp/cg BPF=/tmp/bpffs
mkdir -p $CG $BPF
mount -t cgroup2 none $CG || fail "cannot mount cgroup2"
mount -t bpf bpf $BPF || fail "cannot mount bpffs"
[ -r /sys/kernel/btf/vmlinux ] && note "BTF: /sys/kernel/btf/vmlinux present ($(wc -c < /sys/kernel/btf/vmlinux) bytes)" || note "BTF: /sys/kernel/btf/vmlinux MISSING"
if grep -q ' bpf_sock_destroy$' /proc/kallsyms; then note "bpf_sock_destroy: present"
else note "bpf_sock_destroy: absent (the kernel predates 6.5): svcproxy closes no sockets of removed backends here (not exercised: the benchmark removes none)"; fi
CGON=$CG/slb-on CGOFF=$CG/slb-off PINS=$BPF/svcproxy
mkdir $CGON $CGOFF

# ---- the labs -------------------------------------------------------------------------
LIFETIME=$((1800 + ROUNDS * 18 * (SECS + 20)))
PODS=""
k=1
while [ $k -le "$E" ]; do PODS="$PODS${PODS:+,}198.18.1.$k"; k=$((k + 1)); done
pod() { # pod LAB NS INDEX IP
  node=$1-node ns=$2 idx=$3 ip=$4 gw=198.19.0.$3
  ip netns add "$ns" && ip -n "$ns" link set lo up
  ip -n "$node" link add "vp$idx" type veth peer name eth0 netns "$ns"
  ip -n "$node" addr add "$gw/32" dev "vp$idx"
  ip -n "$node" link set "vp$idx" up
  ip -n "$node" route add "$ip/32" dev "vp$idx" src "$gw"
  ip -n "$ns" addr add "$ip/32" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add "$gw/32" dev eth0 scope link src "$ip"
  ip -n "$ns" route add 198.18.0.0/15 via "$gw" dev eth0 src "$ip"
}
lab() { # lab NAME
  ip netns add "$1-node" && ip -n "$1-node" link set lo up || fail "netns $1-node"
  ip netns exec "$1-node" sysctl -w net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 > /dev/null
  ip -n "$1-node" addr add 198.19.0.254/32 dev lo
  pod "$1" "$1-client" 1 198.18.0.2 || fail "pod $1-client"
  ip netns exec "$1-client" sysctl -w net.ipv4.ip_local_port_range="1024 65535" > /dev/null
  k=1
  while [ $k -le "$E" ]; do
    pod "$1" "$1-b$k" $((k + 1)) "198.18.1.$k" || fail "pod $1-b$k"
    ip netns exec "$1-b$k" "$B" net-serve "198.18.1.$k" --threads 2 --for "$LIFETIME" > /dev/null 2>> /tmp/serve.err &
    k=$((k + 1))
  done
}
lab bare
lab ipvs
say "labs built: 2 x (node, client, $E pods)"

SVC=$("$B" socketlb-cluster --services "$N" --endpoints "$E" --pods "$PODS" --write /tmp/cluster.yaml) || fail "socketlb-cluster"
DIRECT_TCP=$(echo "$PODS" | sed 's/,/:8080,/g; s/$/:8080/')
DIRECT_UDP=$(echo "$PODS" | sed 's/,/:5353,/g; s/$/:5353/')

LOAD_OUT=""
net_load() { # net_load LAB CGROUP KIND TARGETS THREADS SECONDS [net-load options]
  nl_lab=$1 nl_cg=$2 nl_kind=$3 nl_to=$4 nl_threads=$5 nl_secs=$6
  shift 6
  LOAD_OUT=$(ip netns exec "$nl_lab-client" timeout -s KILL $((nl_secs + 60)) "$B" net-load "$nl_kind" "$nl_to" --threads "$nl_threads" \
    --seconds "$nl_secs" --cgroup-procs "$nl_cg/cgroup.procs" "$@" 2>> /tmp/load.err) || { tail -5 /tmp/load.err; fail "net-load $nl_lab $nl_kind $nl_to $*"; }
}
field() { echo "$LOAD_OUT" | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }

# Every server answers both protocols in both labs (bounded; round-robin: every pod asked).
for l in bare ipvs; do
  ok=0
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    net_load $l $CGOFF tcp "$DIRECT_TCP" 1 1 --pick round-robin; t=$(field errors)
    net_load $l $CGOFF udp "$DIRECT_UDP" 1 1 --pick round-robin
    [ "$t" = 0 ] && [ "$(field errors)" = 0 ] && { ok=1; break; }
    sleep 1
  done
  [ $ok = 1 ] || { tail -5 /tmp/serve.err; fail "the $l lab's pods do not all answer"; }
done
say "servers answer in both labs"

# ---- the one sync ---------------------------------------------------------------------
up() { cut -d' ' -f1 /proc/uptime; }
t0=$(up)
ip netns exec ipvs-node "$S" sync --from /tmp/cluster.yaml --hostname-override node-0 --node-ip 198.19.0.254 \
  --cluster-cidr 198.18.0.0/16 --proxy-mode ipvs --iptables-backend legacy \
  --socket-lb --socket-lb-cgroup $CGON --socket-lb-pin-dir $PINS > /tmp/sync.log 2>&1
rc=$?
t1=$(up)
SOCKETLB=1
if [ $rc != 0 ]; then
  # The finding, then IPVS alone (a sync without --socket-lb) so the IPVS rows still stand.
  note "svcproxy sync --proxy-mode ipvs --socket-lb FAILED (rc $rc) in this kernel: $(grep -iE 'error|socket' /tmp/sync.log | tail -3 | tr '\t\n' '  ' | cut -c1-600)"
  SOCKETLB=0
  t0=$(up)
  ip netns exec ipvs-node "$S" sync --from /tmp/cluster.yaml --hostname-override node-0 --node-ip 198.19.0.254 \
    --cluster-cidr 198.18.0.0/16 --proxy-mode ipvs --iptables-backend legacy > /tmp/sync.log 2>&1 || { tail -20 /tmp/sync.log; fail "svcproxy sync --proxy-mode ipvs"; }
  t1=$(up)
fi
record sync 1 ipvs "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
note "IPVS: $(ip netns exec ipvs-node ipvsadm -Ln | grep -c '^[TU]') virtual servers in the node; kube-ipvs0 holds $(ip -n ipvs-node -4 addr show dev kube-ipvs0 | grep -c inet) addresses"
[ $SOCKETLB = 1 ] && note "socket-LB: programs pinned in $PINS: $(ls $PINS | tr '\n' ' ')"
grep -iE ' (WARN|ERROR) ' /tmp/sync.log | head -5 | cut -c1-300 | while read -r l; do note "sync log: $l"; done
say "synced in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s (socket-LB: $SOCKETLB)"

ct_count() { # ct_count LAB: conntrack entries to a Service address, and all; then flushed
  ip netns exec "$1-node" conntrack -L -f ipv4 2> /dev/null | awk '
    { n++; for (i = 1; i <= NF; i++) if ($i ~ /^dst=/) { split(substr($i, 5), o, "."); if (o[1] == 198 && o[2] == 19 && o[3] >= 128) s++; break } }
    END { printf "%d %d\n", s, n }'
  ip netns exec "$1-node" conntrack -F > /dev/null 2>&1
}
# IPVS keeps its own connection table (not conntrack): an entry lives 10 s after a reset,
# and a direct connection whose source port one of them holds has its reply rewritten to
# the ClusterIP (the client resets it, then times out). Each run in the IPVS lab starts with
# no TCP entry there (bounded wait), so a run does not measure the previous run's leftovers.
ipvs_tcp_conns() { ip netns exec ipvs-node awk 'NR > 1 && $1 == "TCP"' /proc/net/ip_vs_conn | wc -l; }
drain() { # drain ROUND MODE NAME
  w0=$(up) left=$(ipvs_tcp_conns) n=0
  while [ "$left" -gt 0 ] && [ $n -lt 60 ]; do sleep 0.5; left=$(ipvs_tcp_conns); n=$((n + 1)); done
  record drain "$1" "$2" "$3" "$(awk -v a="$w0" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }')" "$left"
}
measure() { # measure ROUND MODE NAME LAB CGROUP KIND TARGETS [net-load options]
  m_r=$1 m_mode=$2 m_name=$3 m_lab=$4 m_cg=$5 m_kind=$6 m_to=$7
  shift 7
  [ "$m_lab" = ipvs ] && drain "$m_r" "$m_mode" "$m_name"
  ip netns exec "$m_lab-node" conntrack -F > /dev/null 2>&1
  net_load "$m_lab" "$m_cg" "$m_kind" "$m_to" "$THREADS" "$SECS" "$@"
  ct=$(ct_count "$m_lab")
  record "$m_r" "$m_mode" "$m_name" "$THREADS" "$(field rate)" "$(field errors)" "$(field user)" "$(field sys)" "$(field machine_busy)" "$(field secs)" ${ct% *} ${ct#* }
  say "round $m_r $m_mode $m_name: $(field rate)/s, $(field errors) errors; conntrack to a Service address: ${ct% *} (of ${ct#* })"
}
directs() { # directs ROUND MODE LAB CGROUP KIND TARGETS: each direct run (DIRECT_RUNS)
  for d in $DIRECT_RUNS; do measure "$1" "$2" "$5-${d%%:*}" "$3" "$4" "$5" "$6" --pick "${d#*:}"; done
}

# ---- the generator's own limit, then the rounds ----------------------------------------
if [ "$SCALING" = 1 ]; then
  for t in 1 2 4 8; do
    s=$((SECS < 3 ? SECS : 3))
    net_load bare $CGOFF tcp "$DIRECT_TCP" "$t" "$s" --pick "$FIRST_PICK"
    record scaling floor tcp-direct "$t" "$(field rate)" "$(field errors)" "$(field user)" "$(field sys)" "$(field machine_busy)" "$(field secs)"
    say "scaling: $t threads: $(field rate) conn/s"
  done
fi
r=1
while [ $r -le "$ROUNDS" ]; do
  directs $r floor bare $CGOFF tcp "$DIRECT_TCP"
  directs $r floor bare $CGOFF udp "$DIRECT_UDP"
  for mode in ipvs ipvs+socket-lb; do
    cg=$CGOFF
    if [ $mode = ipvs+socket-lb ]; then [ $SOCKETLB = 1 ] || continue; cg=$CGON; fi
    measure $r $mode tcp-svc ipvs $cg tcp "$SVC:80"
    directs $r $mode ipvs $cg tcp "$DIRECT_TCP"
    measure $r $mode udp-svc ipvs $cg udp "$SVC:53"
    directs $r $mode ipvs $cg udp "$DIRECT_UDP"
  done
  r=$((r + 1))
done
say "done"
