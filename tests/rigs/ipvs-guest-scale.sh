#!/bin/dash
# Guest side of the IPVS scale measurement (not part of the ipvs_vm test: one boot,
# minutes under software emulation). Run by tests/rigs/run-ipvs-scale.sh.
#   ipvs-guest-scale.sh SVCPROXY DATA_DIR   (DATA_DIR: big.yaml, big2.yaml = one endpoint changed)
# Every figure is wall time inside the VM (TCG: no KVM here), so compare the lines with
# each other, not with a real node.
set -u
S=$1; D=$2
now() { cut -d' ' -f1 /proc/uptime; }
took() { echo "$1 $2" | awk '{printf "%.2f", $2 - $1}'; }
run() { "$S" sync --mode ipvs --iptables-backend legacy --from "$@"; }
ip link add eth0 type dummy && ip link set eth0 up && ip addr add 192.168.0.10/24 dev eth0

t0=$(now); "$S" render --mode ipvs --from "$D/big.yaml" >/tmp/plan.txt; t1=$(now)
echo "scale: render --mode ipvs (read the YAML, track, plan, print): $(took $t0 $t1) s"
t0=$(now); run "$D/big.yaml" 2>/tmp/err || { cat /tmp/err; exit 1; }; t1=$(now)
vs=$(ipvsadm -Sn | grep -c '^-A'); rs=$(ipvsadm -Sn | grep -c '^-a')
echo "scale: full sync (IPVS + kube-ipvs0 + ipsets + iptables) of $vs virtual servers, $rs real servers: $(took $t0 $t1) s ($(cat /tmp/err))"
t0=$(now); run "$D/big.yaml" --dry-run >/tmp/dry; rc=$?; t1=$(now)
echo "scale: dry-run after it: exit $rc, $(wc -l </tmp/dry) line(s), $(took $t0 $t1) s"
t0=$(now); run "$D/big2.yaml" 2>/tmp/err; t1=$(now)
echo "scale: one-endpoint change: $(took $t0 $t1) s ($(cat /tmp/err))"
ipvsadm -Sn >/tmp/saved
ipvsadm -C
t0=$(now); run "$D/big2.yaml" 2>/tmp/err; t1=$(now)
echo "scale: IPVS-only resync (everything else in place): $(took $t0 $t1) s ($(cat /tmp/err))"
ipvsadm -C
t0=$(now); ipvsadm -R </tmp/saved; t1=$(now)
echo "scale: ipvsadm --restore of the same $(wc -l </tmp/saved) lines: $(took $t0 $t1) s"
