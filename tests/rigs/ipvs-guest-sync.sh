#!/bin/dash
# Guest side of the ipvs_vm test (run by ipvs-vm.sh as root, inside the VM).
#   ipvs-guest-sync.sh SVCPROXY DATA_DIR
# DATA_DIR holds demo.yaml, demo.ipvs (its golden), dataplane-{1,2,3,4}.yaml and
# walk-SEED-STEP.yaml (random change sequences), and ipvs-guest-udp.sh (sourced last).
# Prints "ok NAME" / "FAIL NAME: why" per check and "guest: P passed, F failed" last.
set -u
S=$1; D=$2
PASS=0; FAIL=0
ok() { echo "ok $1"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $1: $2"; FAIL=$((FAIL + 1)); }
t() { cut -d' ' -f1 /proc/uptime; }
sync_ipvs() { "$S" sync --mode ipvs --iptables-backend legacy --from "$@"; }
section() { sed -n "/^# $2\$/,/^# /p" "$1" | grep -v '^#'; }
same() { # NAME WANT_FILE GOT_FILE
  if [ ! -s "$2" ]; then bad "$1" "empty golden section"; return; fi
  if cmp -s "$2" "$3"; then ok "$1"; else bad "$1" "differs"; diff "$2" "$3" | head -20; fi
}

# ---- node like the demo's node-1 -------------------------------------------
ip link add eth0 type dummy && ip link set eth0 up
ip addr add 192.168.10.11/24 dev eth0
ip -6 addr add fd00:192:168:10::11/64 dev eth0 nodad

t0=$(t)
if sync_ipvs "$D/demo.yaml" >/tmp/sync.out 2>&1; then ok "demo sync ($(t) - $t0 s)"; else bad "demo sync" "$(cat /tmp/sync.out)"; fi
t0=$(t)
"$S" sync --mode ipvs --iptables-backend legacy --from "$D/demo.yaml" --dry-run >/tmp/dry.out 2>&1; rc=$?
if [ $rc = 0 ] && [ ! -s /tmp/dry.out ]; then ok "demo dry-run after sync reports nothing ($(t) - $t0 s)"; else bad "demo dry-run" "rc=$rc $(head -30 /tmp/dry.out)"; fi

section "$D/demo.ipvs" "ipvsadm -Sn" | sort >/tmp/want.ipvs
ipvsadm -Sn | sort >/tmp/got.ipvs
same "ipvsadm -Sn equals golden/demo.ipvs" /tmp/want.ipvs /tmp/got.ipvs
section "$D/demo.ipvs" "kube-ipvs0" | sort >/tmp/want.addr
ip addr show kube-ipvs0 | awk '$1=="inet"||$1=="inet6"{print $2}' | sort >/tmp/got.addr
same "ip addr show kube-ipvs0 equals golden" /tmp/want.addr /tmp/got.addr
section "$D/demo.ipvs" "ipset" | sort >/tmp/want.set
ipset save | sed 's/ bucketsize [0-9]* initval 0x[0-9a-f]*//' | sort >/tmp/got.set
same "ipset save equals golden" /tmp/want.set /tmp/got.set

t0=$(t)
"$S" cleanup >/tmp/clean.out 2>&1; rc=$?
left="$(ipvsadm -Sn)$(ip link show kube-ipvs0 2>/dev/null)$(ipset list -n)$(iptables-legacy-save | grep KUBE-)$(ip6tables-legacy-save | grep KUBE-)"
if [ $rc = 0 ] && [ -z "$left" ]; then ok "cleanup removes everything ($(t) - $t0 s)"; else bad "cleanup" "rc=$rc left: $left $(cat /tmp/clean.out)"; fi

# ---- dataplane: pods and a client in network namespaces -------------------
i=1
for ns in pod1 pod2 client; do
  ip netns add $ns
  ip link add n-$ns type veth peer name eth0 netns $ns
  ip addr add 198.19.0.$i/32 dev n-$ns
  ip link set n-$ns up
  ip route add 198.18.$i.2/32 dev n-$ns
  ip -n $ns link set lo up
  ip -n $ns addr add 198.18.$i.2/32 dev eth0
  ip -n $ns link set eth0 up
  ip -n $ns route add 198.19.0.0/16 dev eth0 scope link
  ip -n $ns route add 198.18.0.0/16 via 198.19.0.$i dev eth0 onlink
  i=$((i + 1))
done
for p in 1 2; do
  ip netns exec pod$p socat -T30 TCP-LISTEN:8080,bind=198.18.$p.2,fork,reuseaddr \
    SYSTEM:"echo pod$p; sleep \${HOLD:-0}" </dev/null >/dev/null 2>&1 &
done
sleep 0.5
VIP=198.19.255.10
conns() { # N: one connection each from the client pod; prints "COUNT podX" lines
  for k in $(seq 1 "$1"); do ip netns exec client timeout 3 socat -T2 - TCP:$VIP:80 </dev/null 2>/dev/null || echo error; done | sort | uniq -c
}
count() { echo "$1" | awk -v p="$2" '$2==p{print $1}'; }
weight_of() { ipvsadm -Sn | awk -v r="$1" '$1=="-a" && $5==r {print $8}'; }

# Long enough that a sync and a dry run under TCG on a loaded host (6-7 s each were seen)
# finish inside it; the waits below go past it.
export SVCPROXY_IPVS_GRACE_PERIOD=10
if sync_ipvs "$D/dataplane-1.yaml" >/tmp/sync.out 2>&1; then ok "dataplane step 1 sync"; else bad "dataplane step 1 sync" "$(cat /tmp/sync.out)"; fi
out=$(conns 20)
if [ -n "$(count "$out" pod1)" ] && [ -n "$(count "$out" pod2)" ]; then ok "ClusterIP connections spread: $(echo $out)"; else bad "spread" "$out"; fi

# Long-lived connections on both pods, then pod2 leaves the slice.
for k in 1 2 3 4; do ip netns exec client socat -T20 - TCP:$VIP:80 </dev/null >/dev/null 2>&1 & done
sleep 0.5
ipvsadm -Ln >/tmp/before.txt
if sync_ipvs "$D/dataplane-2.yaml" >/tmp/sync.out 2>&1; then ok "dataplane step 2 sync"; else bad "dataplane step 2 sync" "$(cat /tmp/sync.out)"; fi
w=$(weight_of 198.18.2.2:8080)
if [ "$w" = 0 ]; then ok "removed endpoint with connections drains at weight 0"; else bad "graceful termination" "pod2 weight '$w'; $(ipvsadm -Ln; cat /tmp/before.txt)"; fi
"$S" sync --mode ipvs --iptables-backend legacy --from "$D/dataplane-2.yaml" --dry-run >/tmp/dry.out 2>&1; rc=$?
if [ $rc = 0 ]; then ok "dry-run while draining reports nothing"; else bad "dry-run while draining" "rc=$rc $(cat /tmp/dry.out)"; fi
out=$(conns 8)
if [ "$(count "$out" pod1)" = 8 ]; then ok "new connections avoid the draining pod"; else bad "draining pod" "$out"; fi
# The live IPVS trace reads the same kernel: pod1 takes every new connection, pod2 drains.
"$S" trace --mode ipvs --live --iptables-backend legacy --from "$D/dataplane-2.yaml" --src 198.18.3.2 --dst $VIP:80 >/tmp/trace.out 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "^  real server 198.18.1.2:8080 weight 1: 100.00% of new connections" /tmp/trace.out \
  && grep -q "^  real server 198.18.2.2:8080 weight 0: draining" /tmp/trace.out \
  && grep -q "^100.00%  IPVS to 198.18.1.2:8080" /tmp/trace.out; then
  ok "trace --live --mode ipvs shows the kernel's state (pod1 100%, pod2 draining)"
else bad "live IPVS trace" "rc=$rc $(head -20 /tmp/trace.out)"; fi
# Restart: the process memory is gone; the kernel's weight 0 is the state.
rm -f /run/svcproxy/ipvs-terminating
sync_ipvs "$D/dataplane-2.yaml" >/dev/null 2>&1
w=$(weight_of 198.18.2.2:8080)
if [ "$w" = 0 ]; then ok "after a restart the draining server is still known"; else bad "restart" "pod2 weight '$w'"; fi
sleep 11
sync_ipvs "$D/dataplane-2.yaml" >/dev/null 2>&1
w=$(weight_of 198.18.2.2:8080)
if [ -z "$w" ]; then ok "draining server deleted after the bounded time (no weight-0 leftovers)"; else bad "bounded time" "pod2 weight '$w'"; fi

if sync_ipvs "$D/dataplane-3.yaml" >/tmp/sync.out 2>&1; then ok "dataplane step 3 sync (affinity)"; else bad "step 3 sync" "$(cat /tmp/sync.out)"; fi
out=$(conns 12)
if [ "$(echo "$out" | grep -c pod)" = 1 ] && ! echo "$out" | grep -q error; then ok "ClientIP affinity pins: $(echo $out)"; else bad "affinity" "$out"; fi
"$S" sync --mode ipvs --iptables-backend legacy --from "$D/dataplane-3.yaml" --dry-run >/tmp/dry.out 2>&1; rc=$?
if [ $rc = 0 ] && [ ! -s /tmp/dry.out ]; then ok "dry-run after step 3 reports nothing"; else bad "dry-run step 3" "rc=$rc $(cat /tmp/dry.out)"; fi

# ---- watch mode: follows file changes, drains, keeps the rules on SIGTERM ----
wait_for() { # a shell condition; polls it for up to 30 s
  k=0
  while [ $k -lt 150 ]; do if eval "$1"; then return 0; fi; sleep 0.2; k=$((k + 1)); done
  return 1
}
mkdir -p /tmp/watch && cp "$D/dataplane-1.yaml" /tmp/watch/cluster.yaml
"$S" sync --watch --mode ipvs --iptables-backend legacy --from /tmp/watch --min-sync-period 100ms --sync-period 2s \
  --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 2>/tmp/watch.log &
W=$!
if wait_for '[ "$(weight_of 198.18.2.2:8080)" = 1 ]'; then ok "watch: the first state is programmed"; else bad "watch: first state" "$(ipvsadm -Ln; tail -5 /tmp/watch.log)"; fi
cp "$D/dataplane-2.yaml" /tmp/watch/.next && mv /tmp/watch/.next /tmp/watch/cluster.yaml
if wait_for '[ -z "$(weight_of 198.18.2.2:8080)" ]'; then ok "watch: a removed endpoint's real server goes (drained, then deleted by a later sync)"; else bad "watch: removal" "$(ipvsadm -Ln; tail -5 /tmp/watch.log)"; fi
out=$(conns 8)
if [ "$(count "$out" pod1)" = 8 ]; then ok "watch: connections follow the change"; else bad "watch: connections" "$out"; fi
# Partial syncs (from memory, no kernel read) through a sequence of changes: after each
# one the kernel settles where a full sync would leave it (a dry run finds nothing), and
# no sync but the first was full.
seq_ok=1
for f in dataplane-3 dataplane-1 dataplane-3 dataplane-2; do
  cp "$D/$f.yaml" /tmp/watch/.next && mv /tmp/watch/.next /tmp/watch/cluster.yaml
  if ! wait_for '"$S" sync --mode ipvs --iptables-backend legacy --from /tmp/watch/cluster.yaml --dry-run >/tmp/dry.out 2>&1 && [ ! -s /tmp/dry.out ]'; then
    seq_ok=0; bad "watch: partial syncs to $f leave the kernel as a full sync would" "$(head -30 /tmp/dry.out; tail -5 /tmp/watch.log)"; break
  fi
done
fulls=$(grep -c 'kind=Full' /tmp/watch.log); partials=$(grep -c 'kind=Partial' /tmp/watch.log)
if [ $seq_ok = 1 ] && [ "$fulls" = 1 ] && [ "$partials" -ge 5 ]; then ok "watch: partial syncs through 5 changes never drift from a full sync ($fulls full, $partials partial)"
elif [ $seq_ok = 1 ]; then bad "watch: only the first sync is full" "$fulls full, $partials partial: $(grep -E 'kind=' /tmp/watch.log | tail -5)"; fi
# Someone else flushes nat, then clears IPVS: the canary checks (one per sync period)
# notice, and a full sync repairs each.
clean='"$S" sync --mode ipvs --iptables-backend legacy --from /tmp/watch/cluster.yaml --dry-run >/tmp/dry.out 2>&1 && [ ! -s /tmp/dry.out ]'
iptables-legacy -t nat -F
if wait_for "$clean"; then ipvsadm -C; if wait_for "$clean"; then repaired=1; else repaired=0; fi; else repaired=0; fi
fulls=$(grep -c 'kind=Full' /tmp/watch.log)
if [ $repaired = 1 ] && [ "$fulls" = 3 ]; then ok "watch: a flushed nat table, then a cleared IPVS table, repaired by one full sync each"
else bad "watch: flushes repaired" "$fulls full; $(head -20 /tmp/dry.out; grep -E 'CANARY|gone|kind=Full' /tmp/watch.log | tail -5)"; fi
kill -TERM $W; wait $W; rc=$?
out=$(conns 4)
if [ $rc = 0 ] && [ "$(count "$out" pod1)" = 4 ]; then ok "watch: SIGTERM stops it and the rules keep serving"; else bad "watch: SIGTERM" "rc=$rc $out $(tail -5 /tmp/watch.log)"; fi

# ---- from outside the node: an "outside" namespace beside it -----------------
# outside 198.19.1.2/24 -- node 198.19.1.1/24 (n-outside); servers on :8081 answer
# "<pod> <peer address>". The pods route the outside subnet via their node end (their
# 198.19.0.0/16 link route would ARP for it, and nothing answers that).
ip netns add outside
ip link add n-outside type veth peer name eth0 netns outside
ip addr add 198.19.1.1/24 dev n-outside
ip link set n-outside up
ip -n outside link set lo up
ip -n outside addr add 198.19.1.2/24 dev eth0
ip -n outside link set eth0 up
ip -n outside route add 198.18.0.0/15 via 198.19.1.1
for p in 1 2; do
  ip -n pod$p route add 198.19.1.0/24 via 198.19.0.$p dev eth0 onlink
  ip netns exec pod$p socat -T5 TCP-LISTEN:8081,bind=198.18.$p.2,fork,reuseaddr \
    SYSTEM:'echo pod'$p' $SOCAT_PEERADDR' </dev/null >/dev/null 2>&1 &
done
sleep 0.5
peers() { # NS DST PORT N: "COUNT pod peer" lines ("COUNT error" for a failed attempt)
  for k in $(seq 1 "$4"); do ip netns exec "$1" timeout 3 socat -T2 - TCP:$2:$3 </dev/null 2>/dev/null || echo error; done | sort | uniq -c
}
only() { # NAME OUT "pod peer"...: every attempt answered, by exactly these (pod, peer) pairs
  name=$1; out=$2; shift 2
  got=$(echo "$out" | awk '{$1=""; sub(/^ /, ""); print}' | sort | tr '\n' ';')
  want=$(for w in "$@"; do echo "$w"; done | sort | tr '\n' ';')
  if [ "$got" = "$want" ]; then ok "$name: $(echo $out)"; else bad "$name" "want $want got $(echo $out)"; fi
}
none() { # NAME OUT: no attempt answered
  if [ "$(echo "$2" | grep -c pod)" = 0 ]; then ok "$1: $(echo $2)"; else bad "$1" "answered: $(echo $2)"; fi
}
if sync_ipvs "$D/dataplane-4.yaml" >/tmp/sync.out 2>&1; then ok "outside: sync"; else bad "outside: sync" "$(cat /tmp/sync.out)"; fi
"$S" sync --mode ipvs --iptables-backend legacy --from "$D/dataplane-4.yaml" --dry-run >/tmp/dry.out 2>&1; rc=$?
if [ $rc = 0 ] && [ ! -s /tmp/dry.out ]; then ok "outside: dry-run after sync reports nothing"; else bad "outside: dry-run" "rc=$rc $(head -30 /tmp/dry.out)"; fi
only "outside: hairpin, pod1 to its own service, answered by itself, masqueraded" \
  "$(peers pod1 198.19.255.40 80 6)" "pod1 198.19.0.1"
only "outside: NodePort (ETP Cluster) from outside, every pod, masqueraded" \
  "$(peers outside 198.19.1.1 30400 10)" "pod1 198.19.0.1" "pod2 198.19.0.2"
only "outside: external IP from outside, every pod, masqueraded" \
  "$(peers outside 198.19.2.30 80 10)" "pod1 198.19.0.1" "pod2 198.19.0.2"
only "outside: NodePort (ETP Local) from outside, the local pod, client IP kept" \
  "$(peers outside 198.19.1.1 30401 6)" "pod1 198.19.1.2"
only "outside: LoadBalancer IP (ETP Local) from outside, the local pod, client IP kept" \
  "$(peers outside 198.19.2.22 80 6)" "pod1 198.19.1.2"
only "outside: LoadBalancer IP from outside, inside its source ranges" \
  "$(peers outside 198.19.2.20 80 10)" "pod1 198.19.0.1" "pod2 198.19.0.2"
only "outside: LoadBalancer IP from a pod inside its source ranges" \
  "$(peers client 198.19.2.20 80 10)" "pod1 198.19.0.1" "pod2 198.19.0.2"
# From the node, a local VIP is reached from the VIP itself: allowed because the node IP
# is inside the source ranges (kube-proxy's KUBE-LOAD-BALANCER-SOURCE-IP entry).
node_peers() { for k in $(seq 1 "$1"); do timeout 3 socat -T2 - TCP:198.19.2.20:80 </dev/null 2>/dev/null || echo error; done | sort | uniq -c; }
only "outside: LoadBalancer IP from the node, its IP inside the source ranges" \
  "$(node_peers 10)" "pod1 198.19.0.1" "pod2 198.19.0.2"
none "outside: LoadBalancer IP from outside, not in its source ranges: dropped" "$(peers outside 198.19.2.21 80 2)"
none "outside: LoadBalancer IP from a pod not in its source ranges: dropped" "$(peers client 198.19.2.21 80 2)"

# The health-check node port on the node IP, probed from outside (watch mode serves it).
mkdir -p /tmp/hc && cp "$D/dataplane-4.yaml" /tmp/hc/cluster.yaml
"$S" sync --watch --mode ipvs --iptables-backend legacy --from /tmp/hc --min-sync-period 100ms --sync-period 2s \
  --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 2>/tmp/hc.log &
W=$!
probe() { printf 'GET / HTTP/1.0\r\n\r\n' | ip netns exec outside timeout 3 socat -T2 - TCP:198.19.1.1:32000 2>/dev/null | tr -d '\r'; }
# One answer must carry both the status and the count (two probes could straddle a sync,
# or one of them time out on a slow TCG guest).
answers() { a=$(probe); printf '%s\n' "$a" | grep -q "^HTTP/1\.[01] $1 " && printf '%s\n' "$a" | grep -q "\"localEndpoints\":$2"; }
if wait_for 'answers 200 1'; then
  ok "outside: health-check node port on the node IP answers 200 with localEndpoints 1"
else bad "outside: health-check 200" "$(probe) $(tail -5 /tmp/hc.log)"; fi
sed 's/nodeName: vm-node$/nodeName: vm-node-3/' "$D/dataplane-4.yaml" >/tmp/hc/.next && mv /tmp/hc/.next /tmp/hc/cluster.yaml
if wait_for 'answers 503 0'; then
  ok "outside: health-check node port answers 503 with localEndpoints 0 once none is local"
else bad "outside: health-check 503" "$(probe) $(tail -5 /tmp/hc.log)"; fi
kill -TERM $W; wait $W

# ---- random change sequences: partial syncs never drift from a full sync -----
# walk-SEED-STEP.yaml: a generated cluster (60 services x 3 endpoints) moved by seeded
# random changes (endpoints added, removed, terminating; services deleted, re-added,
# retyped, their policies, affinity and external IPs flipped). Watch mode follows them;
# after each step a dry run (a full comparison with the kernel) must find nothing, and
# every sync but the first must be partial.
mkdir -p /tmp/walk
walk_ok=1; steps=0
for f in $(ls "$D"/walk-*.yaml | sort); do
  cp "$f" /tmp/walk/.next && mv /tmp/walk/.next /tmp/walk/cluster.yaml
  if [ $steps = 0 ]; then
    "$S" sync --watch --mode ipvs --iptables-backend legacy --from /tmp/walk --min-sync-period 100ms --sync-period 2s \
      --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 2>/tmp/walk.log &
    W=$!
  fi
  steps=$((steps + 1))
  if ! wait_for '"$S" sync --mode ipvs --iptables-backend legacy --from /tmp/walk/cluster.yaml --dry-run >/tmp/dry.out 2>&1 && [ ! -s /tmp/dry.out ]'; then
    walk_ok=0; bad "walk: partial syncs to $(basename "$f") leave the kernel as a full sync would" "$(head -30 /tmp/dry.out; tail -5 /tmp/walk.log)"; break
  fi
done
fulls=$(grep -c 'kind=Full' /tmp/walk.log); partials=$(grep -c 'kind=Partial' /tmp/walk.log)
if [ $walk_ok = 1 ] && [ "$fulls" = 1 ] && [ "$partials" -ge $((steps / 2)) ]; then
  ok "walk: $steps random steps, each equal to a full sync ($fulls full, $partials partial)"
elif [ $walk_ok = 1 ]; then bad "walk: only the first sync is full" "$steps steps, $fulls full, $partials partial: $(grep -E 'kind=' /tmp/walk.log | tail -5)"; fi
kill -TERM $W; wait $W

# ---- UDP flows from one source port: svcproxy's conntrack reconciler (issue 34) -------
# In namespaces of their own (unode, upod1, upod2, uclient); see the script's header.
. "$D/ipvs-guest-udp.sh"

echo "guest: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
