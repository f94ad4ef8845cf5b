#!/bin/dash
# Guest side of the IPVS soak over the test API server (one boot; run by scripts/soak-ipvs).
#   ipvs-guest-apisoak.sh BENCH SVCPROXY SERVICES RATE CHANGES_FOR IDLE_FOR
# For each mode (ipvs, then iptables with the legacy backend), in a network namespace of
# its own (loopback up; a dummy eth0 holds the node's address): `svcproxy-bench soak`
# serves the generated cluster from its test API server on 127.0.0.1 (the real list/watch
# protocol), runs `svcproxy sync --watch` against it (the real kube-rs client), changes
# one endpoint RATE times a second for CHANGES_FOR s, then idles IDLE_FOR s, sampling
# svcproxy's memory, CPU and metrics. The same seed makes the same cluster and the same
# sequence of slices changed in both modes.
# Prints each run's files as `apisoak<TAB>MODE<TAB>FILE<TAB>LINE` (soak.tsv, summary.txt,
# figures.tsv; the host script writes them back), then svcproxy's first warnings.
set -u
B=$1; S=$2; N=$3; RATE=$4; FOR=$5; IDLE=$6
run() { # run MODE
  mode=$1; ns=apisoak-$mode; dir=/tmp/apisoak-$mode
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" link add eth0 type dummy && ip -n "$ns" link set eth0 up && ip -n "$ns" addr add 192.168.0.10/24 dev eth0
  echo "apisoak: $mode: start $(cut -d' ' -f1 /proc/uptime) s after boot"
  ip netns exec "$ns" "$B" soak --services "$N" --endpoints 10 --rate "$RATE" --changes-for "$FOR" --idle-for "$IDLE" \
    --mode "$mode" --backend legacy --svcproxy "$S" --dir "$dir" \
    --svcproxy-arg=--conntrack-max-per-core --svcproxy-arg=0 >/dev/null 2>"$dir.err" &
  pid=$!
  # progress on the console (the host can follow it live): svcproxy's last log line
  while kill -0 $pid 2>/dev/null; do
    sleep 30
    [ -f "$dir/svcproxy.log" ] && echo "apisoak: $mode: $(cut -d' ' -f1 /proc/uptime) s, MemAvailable $(awk '/MemAvailable/{print $2}' /proc/meminfo) kB: $(tail -1 "$dir/svcproxy.log" | cut -c1-200)"
  done
  wait $pid
  rc=$?
  echo "apisoak: $mode: end $(cut -d' ' -f1 /proc/uptime) s after boot, rc $rc"
  for f in soak.tsv summary.txt figures.tsv; do
    [ -f "$dir/$f" ] && sed "s/^/apisoak	$mode	$f	/" "$dir/$f"
  done
  [ -f "$dir/svcproxy.log" ] && grep -E ' (ERROR|WARN) ' "$dir/svcproxy.log" | head -5 | cut -c1-300
  if [ $rc -ne 0 ]; then
    echo "apisoak: $mode: svcproxy-bench soak failed ($rc):"
    dmesg | grep -i -A2 'out of memory\|killed process' | tail -6
    tail -20 "$dir.err"
    [ -f "$dir/svcproxy.log" ] && tail -20 "$dir/svcproxy.log"
  fi
  ip netns delete "$ns"
  return $rc
}

echo "apisoak: kernel $(uname -r), memory $(awk '/MemTotal/{print $2}' /proc/meminfo) kB, $N services x 10 endpoints"
run ipvs || exit 1
run iptables || exit 1
