#!/bin/dash
# Issue 38's IPVS cell: `--socket-lb` closes the sockets of a removed backend, in a VM whose
# kernel has bpf_sock_destroy (6.5+; ipvs_vm boots Debian's 6.12 for it, the main boot's
# 6.1 has none). Run by tests/rigs/ipvs-vm.sh as root:
#   ipvs-guest-sockdestroy.sh SVCPROXY CLIENT
# CLIENT is the ipvs_vm test binary (tests/support/vm_guest.rs: __ipvs_vm_serve,
# __ipvs_vm_stream, __ipvs_vm_now). Namespaces, dual-stack: snode (svcproxy, one-shot
# syncs in IPVS mode with --socket-lb; IPVS, kube-ipvs0), spod1 and spod2 (UDP and TCP
# servers on :5353 answering "pod1" / "pod2"), sclient (the clients, each in the cgroup
# the programs are attached to). One Service, ClusterIPs 198.19.255.30 and fd00:19:ff::30,
# ports 53/udp and 80/tcp -> 5353. The claims are the kernel tier's
# socket_lb_removed_backend_sockets_are_closed:
#   1. the programs load and attach on this kernel (the sync with pod1 alone);
#   2. clients send every 100 ms: connected UDP (v4, v6), unconnected UDP (v4) and TCP (v4)
#      to the Service, and a control, connected UDP to pod1's own address; all are
#      answered by pod1;
#   3. a sync with pod2 alone (pod1 still serving, so only a closed socket moves a
#      client) says it closed the two connected UDP sockets; within 1 s of its end pod2
#      answers every UDP client of the Service and pod1 none of them; the connected ones
#      saw their socket fail; the TCP connection drains on pod1, uncut (as kube-proxy
#      leaves TCP); the control is untouched;
#   4. IPVS saw no connection to the ClusterIPs: the socket path carried it all.
# Prints "ok NAME" / "FAIL NAME: why" per check and "guest: P passed, F failed" last.
set -u
S=$1; C=$2
PASS=0; FAIL=0
ok() { echo "ok $1"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $1: $2"; FAIL=$((FAIL + 1)); }
now() { "$C" __ipvs_vm_now; }
t() { cut -d' ' -f1 /proc/uptime; }
D=/tmp/sd
mkdir -p $D
t_begin=$(t)
VIP=198.19.255.30 VIP6=fd00:19:ff::30

# ---- the kernel -----------------------------------------------------------------------
btf=absent; [ -r /sys/kernel/btf/vmlinux ] && btf=present
kf=absent; grep -q ' bpf_sock_destroy$' /proc/kallsyms && kf=present
echo "sockdestroy: kernel $(uname -r); BTF $btf; bpf_sock_destroy $kf"
CG=/tmp/cg BPF=/tmp/bpffs
mkdir -p $CG $BPF
mount -t cgroup2 none $CG && mount -t bpf bpf $BPF || { bad "socket-lb: cgroup2 and bpffs mounts" "cannot mount"; echo "guest: $PASS passed, $FAIL failed"; exit 1; }
mkdir $CG/slb
PROCS=$CG/slb/cgroup.procs PINS=$BPF/svcproxy

# ---- the node and its pods --------------------------------------------------------------
nodad() { ip netns exec "$1" sh -c 'echo 0 >/proc/sys/net/ipv6/conf/all/accept_dad; echo 0 >/proc/sys/net/ipv6/conf/default/accept_dad'; }
ip netns add snode
nodad snode
ip -n snode link set lo up
ip -n snode link add eth0 type dummy
ip -n snode addr add 192.168.30.11/24 dev eth0
ip -n snode addr add fd00:192:168:30::11/64 dev eth0 nodad
ip -n snode link set eth0 up
ip netns exec snode sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward; echo 1 >/proc/sys/net/ipv6/conf/all/forwarding'
i=1
for ns in spod1 spod2 sclient; do
  ip netns add $ns
  nodad $ns
  ip link add s-$ns type veth peer name eth0 netns $ns
  ip link set s-$ns netns snode
  ip -n snode addr add 198.19.0.$i/32 dev s-$ns
  ip -n snode addr add fd00:19::$i/128 dev s-$ns nodad
  ip -n snode link set s-$ns up
  ip -n snode route add 198.18.$i.2/32 dev s-$ns
  ip -n snode route add fd00:18:$i::2/128 dev s-$ns
  ip -n $ns link set lo up
  ip -n $ns addr add 198.18.$i.2/32 dev eth0
  ip -n $ns addr add fd00:18:$i::2/128 dev eth0 nodad
  ip -n $ns link set eth0 up
  ip -n $ns route add 198.19.0.$i/32 dev eth0 scope link
  ip -n $ns route add default via 198.19.0.$i dev eth0 onlink
  ip -n $ns route add fd00:19::$i/128 dev eth0
  ip -n $ns route add default via fd00:19::$i dev eth0 onlink
  i=$((i + 1))
done
for p in 1 2; do
  for a in 198.18.$p.2 fd00:18:$p::2; do ip netns exec spod$p "$C" __ipvs_vm_serve $a 5353 pod$p 120 2>>$D/serve.err & done
done

state() { # POD: the cluster, one dual-stack Service whose one endpoint is POD
  printf 'apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode:\n  name: vm-node\n  ips: [192.168.30.11, "fd00:192:168:30::11"]\n'
  printf 'options:\n  ipFamily: both\n  clusterCIDR: 198.18.0.0/16,fd00:18::/48\n  detectLocalMode: ClusterCIDR\n'
  printf -- '---\napiVersion: v1\nkind: Service\nmetadata: {name: dns, namespace: sd}\n'
  printf 'spec:\n  type: ClusterIP\n  clusterIP: %s\n  clusterIPs: [%s, "%s"]\n  ipFamilies: [IPv4, IPv6]\n  ipFamilyPolicy: RequireDualStack\n' $VIP $VIP $VIP6
  printf '  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 5353}, {name: web, port: 80, protocol: TCP, targetPort: 5353}]\n'
  for f in 4 6; do
    if [ $f = 4 ]; then a=198.18.${1#pod}.2; else a="\"fd00:18:${1#pod}::2\""; fi
    printf -- '---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: dns-v%s\n  namespace: sd\n' $f
    printf '  labels: {kubernetes.io/service-name: dns}\naddressType: IPv%s\n' $f
    printf 'ports: [{name: dns, port: 5353, protocol: UDP}, {name: web, port: 5353, protocol: TCP}]\n'
    printf 'endpoints:\n- addresses: [%s]\n  conditions: {ready: true, serving: true, terminating: false}\n  nodeName: vm-node\n' "$a"
  done
}
sync_to() { # POD LOG: a one-shot sync in the node namespace
  state "$1" >$D/cluster.yaml
  ip netns exec snode "$S" sync --mode ipvs --iptables-backend legacy --from $D/cluster.yaml --conntrack-max-per-core 0 \
    --socket-lb --socket-lb-cgroup $CG/slb --socket-lb-pin-dir $PINS >"$2" 2>&1
}

# ---- 1. the programs load ----------------------------------------------------------------
t0=$(t)
if sync_to pod1 $D/sync-1.log && grep -q 'program(s) attached' $D/sync-1.log && ls $PINS | grep -q '^link_'; then
  ok "socket-lb: the programs load and attach on $(uname -r) in IPVS mode ($(ls $PINS | grep -c '^link_') links pinned; sync $(awk -v a="$t0" -v b="$(t)" 'BEGIN{printf "%.1f", b - a}') s)"
else
  bad "socket-lb: the programs load and attach on $(uname -r)" "$(cat $D/sync-1.log; ls $PINS 2>&1)"
  echo "guest: $PASS passed, $FAIL failed"; exit 1
fi

# ---- 2. the clients, all on pod1 --------------------------------------------------------------
# 600 sends at most (60 s); stopped once the checks have what they need.
stream() { # LOG MODE IP PORT
  ip netns exec sclient "$C" __ipvs_vm_stream $PROCS "$2" "$3" "$4" 600 >"$1" 2>>$D/stream.err &
}
stream $D/connected.log udp $VIP 53; P1=$!
stream $D/connected6.log udp $VIP6 53; P2=$!
stream $D/unconnected.log udp-unconnected $VIP 53; P3=$!
stream $D/tcp.log tcp $VIP 80; P4=$!
stream $D/control.log udp 198.18.1.2 5353; P5=$!
LOGS="$D/connected.log $D/connected6.log $D/unconnected.log $D/tcp.log $D/control.log"
bounded() { # CONDITION: polled every 0.2 s, at most 100 times (20 s)
  k=0
  while [ $k -lt 100 ]; do if eval "$1"; then return 0; fi; sleep 0.2; k=$((k + 1)); done
  return 1
}
on_pod1() { for l in $LOGS; do [ "$(grep -c ' ok pod1$' $l)" -ge 5 ] || return 1; done; }
if ! bounded on_pod1; then
  bad "socket-lb: the clients are answered by pod1 before the change" "$(for l in $LOGS; do echo "$l:"; tail -5 $l; done; cat $D/stream.err $D/serve.err)"
  echo "guest: $PASS passed, $FAIL failed"; exit 1
fi

# ---- 3. pod1 removed -----------------------------------------------------------------------
T_START=$(now)
sync_to pod2 $D/sync-2.log; rc=$?
T_SYNCED=$(now)
echo "sockdestroy: the sync removing pod1 took $((T_SYNCED - T_START)) ms: $(grep socket-lb $D/sync-2.log | tr '\n' ' ')"
closed=$(sed -n 's/.*socket-lb: \([0-9]*\) socket(s) of [0-9]* removed backend(s) closed.*/\1/p' $D/sync-2.log)
if [ $rc = 0 ] && [ "${closed:-0}" -ge 2 ]; then ok "socket-lb: the sync removing pod1 closed the connected UDP sockets on it ($closed socket(s))"
else bad "socket-lb: the sync removing pod1 closes the two connected UDP sockets on it" "rc=$rc: $(cat $D/sync-2.log)"; fi
after() { awk -v ts="$T_SYNCED" '$1 >= ts' "$1" | wc -l; }
done_after() { for l in $LOGS; do [ "$(after $l)" -ge 15 ] || return 1; done; }
bounded done_after || echo "sockdestroy: fewer than 15 sends after the sync in some client (the checks below say which)"
kill $P1 $P2 $P3 $P4 $P5 2>/dev/null; wait $P1 $P2 $P3 $P4 $P5 2>/dev/null
judge() { # LOG CONNECTED: prints "ok DETAIL" or "bad DETAIL"
  awk -v ts="$T_SYNCED" -v t0="$T_START" -v connected="$2" '
    { w = substr($0, index($0, " ") + 1) }
    $1 >= t0 && w ~ /^err/ && w !~ /^err timeout/ { if (!failed) cause = w; failed = 1 }
    $1 >= t0 && w == "ok pod1" { last1 = $1 - t0 }
    $1 >= t0 && w == "ok pod2" && first0 == "" { first0 = $1 - t0 }
    $1 >= ts { n++; seen[n] = w; if (w == "ok pod1") p1++; if (w == "ok pod2" && first == "") first = $1 - ts }
    END {
      tail = 0; for (i = n; i > n - 10 && i > 0; i--) if (seen[i] == "ok pod2") tail++
      why = ""
      if (p1 > 0) why = why sprintf("answered by pod1 %d time(s) after the sync; ", p1)
      if (first == "") why = why "pod2 never answered after the sync; "
      else if (first > 1000) why = why sprintf("pod2 first answered %d ms after the sync; ", first)
      if (tail < 10) why = why sprintf("only %d of the last 10 sends answered by pod2; ", tail)
      if (connected && !failed) why = why "the socket never failed; "
      if (why != "") { print "bad " why; exit }
      printf "ok pod2 answered %d ms after the sync, pod1 none of %d sends after it", first, n
      if (connected) printf "; the socket failed (%s) and the client connected again", cause
      printf " (from the start of the %d ms sync: pod1 last answered at %s ms, pod2 first at %d ms)", ts - t0, last1 == "" ? "-" : last1, first0
      print ""
    }' "$1"
}
for c in "connected 1 $VIP" "connected6 1 $VIP6" "unconnected 0 $VIP"; do
  set -- $c
  v=$(judge $D/$1.log $2)
  if [ "${v%% *}" = ok ]; then ok "socket-lb: ${1%6} UDP to $3 moves to pod2 within 1 s of the sync: ${v#ok }"
  else bad "socket-lb: ${1%6} UDP to $3 moves to pod2 within 1 s" "${v#bad }
$(awk -v t0="$T_START" '$1 >= t0 - 500' $D/$1.log | head -30)"; fi
done
n=$(after $D/tcp.log); good=$(awk -v ts="$T_SYNCED" '$1 >= ts && $2 " " $3 == "ok pod1"' $D/tcp.log | wc -l)
errs=$(awk -v t0="$T_START" '$1 >= t0 && $2 != "ok"' $D/tcp.log | wc -l)
if [ "$n" -ge 10 ] && [ "$good" = "$n" ] && [ "$errs" = 0 ]; then ok "socket-lb: the TCP connection to $VIP drains on pod1, uncut ($n sends after the sync, all answered by pod1)"
else bad "socket-lb: the TCP connection drains on pod1, uncut" "$good of $n sends after the sync answered by pod1, $errs failed: $(awk -v t0="$T_START" '$1 >= t0 - 500' $D/tcp.log | head -20)"; fi
# From the sync's start on, as for TCP: a send before it (neighbours still resolving under
# TCG) says nothing about the closing.
n=$(awk -v t0="$T_START" '$1 >= t0' $D/control.log | wc -l); good=$(awk -v t0="$T_START" '$1 >= t0 && $2 " " $3 == "ok pod1"' $D/control.log | wc -l)
if [ "$n" -ge 15 ] && [ "$good" = "$n" ]; then ok "socket-lb: a socket connected to pod1's own address is left alone ($n sends, all answered by pod1)"
else bad "socket-lb: a socket connected to pod1's own address is left alone" "$good of $n answered by pod1: $(grep -v ' ok pod1$' $D/control.log | head -5)"; fi

# ---- 4. the socket path carried it ------------------------------------------------------------
vs=$(ip netns exec snode ipvsadm -Ln 2>/dev/null | grep -cE "^(UDP|TCP) +($VIP|\[$VIP6\]):")
conns=$(ip netns exec snode ipvsadm -Lnc 2>/dev/null | grep -cE "$VIP:|\[$VIP6\]:")
if [ "$vs" = 4 ] && [ "$conns" = 0 ]; then ok "socket-lb: IPVS holds the 4 virtual servers and saw no connection to them (the sockets carried the pods' addresses)"
else bad "socket-lb: no IPVS connection to the ClusterIPs" "virtual servers: $vs of 4: $(ip netns exec snode ipvsadm -Ln); connections: $(ip netns exec snode ipvsadm -Lnc)"; fi

echo "sockdestroy: the case took $(awk -v a="$(t)" -v b="$t_begin" 'BEGIN{printf "%.1f", a - b}') s in the guest"
echo "guest: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
