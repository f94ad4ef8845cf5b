#!/bin/dash
# Guest side of the IPVS soak (one boot; run by tests/rigs/run-ipvs-soak.sh).
#   ipvs-guest-soak.sh SVCPROXY DATA_DIR CHANGES INTERVAL IDLE SAMPLE TIMEOUT
# DATA_DIR/big.yaml is the generated cluster. For each mode (ipvs, then iptables with the
# legacy backend), in a network namespace of its own: `svcproxy sync --watch --from DIR`
# follows a directory holding big.yaml and small.yaml (one Service, one EndpointSlice);
# after the first (full) sync, small.yaml is replaced (rename) CHANGES times, one every
# INTERVAL s (or as soon as the previous change is synced, if that took longer); each
# change waits at most TIMEOUT s for the next `synced` log line that changed something. Then IDLE s of nothing.
# Prints `soak<TAB>MODE<TAB>WHAT<TAB>...` lines (the host script reads them):
#   first   launch->synced(s)  sync seconds  restore_lines  ipvs_ops
#   change  I  change->synced(s)  kind  sync seconds  restore_lines  ipvs_ops
#   rss     t(s since launch)  VmRSS(kB)
#   idle    cpu ticks (self + waited children)  seconds  ticks per second
#   syncs   full  partial  (every `synced` line of the run)
# Wall times are inside the VM (TCG: no KVM), comparable only with each other.
set -u
S=$1; D=$2; CHANGES=$3; INTERVAL=$4; IDLE=$5; SAMPLE=$6; TIMEOUT=$7
now() { cut -d' ' -f1 /proc/uptime; }
sub() { echo "$1 $2" | awk '{printf "%.2f", $2 - $1}'; }
later() { echo "$1 $2" | awk '{exit !($1 >= $2)}'; } # later NOW T: NOW >= T
synced() { grep -c ' synced kind=' "$1"; }
# worked LOG N: the first `synced` line after the first N that changed something (a
# periodic sync with nothing to do, restore_lines=0 and ipvs_ops=0, is not a change's)
worked() { awk -v n="$2" '/ synced kind=/ { c++; if (c > n && !(/ restore_lines=0 / && / ipvs_ops=0( |$)/)) { print; exit } }' "$1"; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; } # field NAME <line
ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)

small() { # small I: the Service and an EndpointSlice of 1..3 endpoints that moves with I
  k=$(( $1 % 3 + 1 )); j=1
  printf 'apiVersion: v1\nkind: Service\nmetadata: {name: soak-svc, namespace: soak}\n'
  printf 'spec:\n  type: ClusterIP\n  clusterIP: 10.111.255.1\n  clusterIPs: [10.111.255.1]\n'
  printf '  ports:\n  - {name: http, port: 80, protocol: TCP, targetPort: 8080}\n---\n'
  printf 'apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n'
  printf 'metadata:\n  name: soak-svc-abcde\n  namespace: soak\n  labels: {kubernetes.io/service-name: soak-svc}\n'
  printf 'addressType: IPv4\nendpoints:\n'
  while [ $j -le $k ]; do
    printf -- '- addresses: [10.200.%d.%d]\n  conditions: {ready: true, serving: true, terminating: false}\n  nodeName: node-1\n' $(( $1 % 250 )) $j
    j=$((j + 1))
  done
  printf 'ports:\n- {name: http, port: 8080, protocol: TCP}\n'
}

soak() { # soak MODE
  mode=$1; ns=soak-$mode; dir=/tmp/c-$mode; log=/tmp/log-$mode
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" link add eth0 type dummy && ip -n "$ns" link set eth0 up && ip -n "$ns" addr add 192.168.0.10/24 dev eth0
  mkdir -p "$dir"; cp "$D/big.yaml" "$dir/big.yaml"; small 0 >"$dir/small.yaml"
  t_launch=$(now)
  ip netns exec "$ns" "$S" sync --watch --from "$dir" --mode "$mode" --iptables-backend legacy --nfacct false --conntrack-max-per-core 0 \
    --healthz-bind-address 127.0.0.1:0 --metrics-bind-address 127.0.0.1:0 >"$log" 2>&1 &
  pid=$!
  ( while kill -0 $pid 2>/dev/null; do
      r=$(awk '/^VmRSS/{print $2}' /proc/$pid/status 2>/dev/null)
      [ -n "$r" ] && printf 'soak\t%s\trss\t%s\t%s\n' "$mode" "$(sub "$t_launch" "$(now)")" "$r"
      sleep "$SAMPLE"
    done ) &
  sampler=$!
  while [ "$(synced "$log")" -eq 0 ]; do
    kill -0 $pid 2>/dev/null || { echo "soak: $mode: svcproxy exited before its first sync:"; tail -20 "$log"; return 1; }
    sleep 0.2
  done
  t=$(now); line=$(grep ' synced kind=' "$log" | head -1)
  printf 'soak\t%s\tfirst\t%s\t%s\t%s\t%s\n' "$mode" "$(sub "$t_launch" "$t")" \
    "$(echo "$line" | field seconds)" "$(echo "$line" | field restore_lines)" "$(echo "$line" | field ipvs_ops)"
  sleep 2
  i=1
  while [ $i -le "$CHANGES" ]; do
    n0=$(synced "$log")
    small $i >/tmp/next.yaml
    t0=$(now); mv /tmp/next.yaml "$dir/small.yaml"
    deadline=$(echo "$t0 $TIMEOUT" | awk '{print $1 + $2}')
    while [ -z "$(worked "$log" "$n0")" ] && ! later "$(now)" "$deadline"; do sleep 0.1; done
    t1=$(now); line=$(worked "$log" "$n0")
    if [ -n "$line" ]; then
      printf 'soak\t%s\tchange\t%d\t%s\t%s\t%s\t%s\t%s\n' "$mode" $i "$(sub "$t0" "$t1")" "$(echo "$line" | field kind)" \
        "$(echo "$line" | field seconds)" "$(echo "$line" | field restore_lines)" "$(echo "$line" | field ipvs_ops)"
    else
      printf 'soak\t%s\tchange\t%d\ttimeout\n' "$mode" $i
    fi
    next=$(echo "$t0 $INTERVAL" | awk '{print $1 + $2}')
    while ! later "$(now)" "$next"; do sleep 0.1; done
    i=$((i + 1))
  done
  # idle: wait for the last change's sync to end (bounded), then measure
  c0=$(ticks $pid); t0=$(now); sleep "$IDLE"; c1=$(ticks $pid); t1=$(now)
  printf 'soak\t%s\tidle\t%s\t%s\t%s\n' "$mode" $((c1 - c0)) "$(sub "$t0" "$t1")" "$HZ"
  printf 'soak\t%s\tsyncs\t%s\t%s\n' "$mode" "$(grep -c ' synced kind=Full' "$log")" "$(grep -c ' synced kind=Partial' "$log")"
  grep -E ' (ERROR|WARN) ' "$log" | head -5 | cut -c1-300
  kill $pid; wait $pid 2>/dev/null
  kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
  ip netns delete "$ns"
  rm -rf "$dir"
}

echo "soak: kernel $(uname -r), $(grep -c '^- addresses' "$D/big.yaml") endpoints in big.yaml, memory $(awk '/MemTotal/{print $2}' /proc/meminfo) kB"
soak ipvs || exit 1
soak iptables || exit 1
