#!/bin/bash
# watch-mode one-endpoint change at 44,125 x 1 (root): a one-shot fill, then three rounds of a
# file watch over the live table with one file renamed over; PERF=1 records perf over the watch
# process around each change. BIN, BENCH (svcproxy-bench), W (work dir), N, NS override the defaults.
set -u
BIN=${BIN:-/work/b37/s9/svcproxy-e46ce09}; BENCH=${BENCH:-/work/b37/s9/svcproxy-bench-ab810f7}
W=${W:-/work/b37/fw37/w}; rm -rf $W; mkdir -p $W/c $W/new
$BENCH nft-partial --services ${N:-44125} --endpoints 1 --write-base $W/gen.yaml --write-changed $W/changed.yaml > $W/partial.nft
split() { total=$(grep -c '^---$' "$1"); awk -v n=100 -v t="$total" -v out="$2" '/^---$/ { d++ } { printf "%s\n", $0 > sprintf("%s/part-%04d.yaml", out, int(d * n / (t + 1))) }' "$1"; }
split $W/gen.yaml $W/c; split $W/changed.yaml $W/new
for f in $W/new/*.yaml; do cmp -s $f $W/c/${f##*/} || part=${f##*/}; done
NS=${NS:-fw37}; ip netns del $NS 2>/dev/null; ip netns add $NS
/usr/bin/time -f "fill %e s" ip netns exec $NS $BIN sync --from $W/gen.yaml --proxy-mode nftables > $W/fill.log 2>&1
tail -2 $W/fill.log; uptime
for round in 1 2 3; do
  cp $W/c/$part $W/orig.yaml
  ip netns exec $NS $BIN sync --watch --from $W/c --proxy-mode nftables --healthz-bind-address 127.0.0.1:0 --metrics-bind-address 127.0.0.1:0 > $W/watch$round.log 2>&1 &
  P=$!
  for i in $(seq 1 300); do grep -q synced $W/watch$round.log && break; sleep 0.1; done
  sleep 4
  if [ "${PERF:-0}" = 1 ]; then
    perf record -e cpu-clock -F 2000 -g -p $P -o $W/perf$round.data -- sleep 3 > /dev/null 2>&1 &
  else
    sleep 3 &
  fi
  PP=$!; sleep 0.5
  cp $W/new/$part $W/tmp.yaml; mv $W/tmp.yaml $W/c/$part
  wait $PP
  kill $P; wait $P 2>/dev/null
  uptime; grep -E "re-read|kind=Partial" $W/watch$round.log | sed 's/\x1b\[[0-9;]*m//g' | tail -3
  # restore the original file for the next round: the kernel now holds the change, so the next watch's first sync re-sends it back
  cp $W/orig.yaml $W/tmp.yaml; mv $W/tmp.yaml $W/c/$part
  ip netns exec $NS $BIN sync --from $W/c --proxy-mode nftables > /dev/null 2>&1
done
ip netns del $NS
