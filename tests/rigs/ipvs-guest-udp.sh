#!/bin/dash
# Issue 34's IPVS cell: stale UDP conntrack flows in IPVS mode, inside the IPVS VM.
# Sourced by ipvs-guest-sync.sh (it shares ok/bad, PASS/FAIL and S); run alone as
#   ipvs-guest-udp.sh SVCPROXY        (as the program of tests/rigs/ipvs-vm.sh)
# Its own namespaces: unode (the node: svcproxy, IPVS, conntrack), upod1 and upod2 (UDP
# servers on :5353 answering "pod1" / "pod2"), uclient (every send from 198.18.3.2:40000,
# one source port, so every send is one conntrack flow per service). Four UDP ClusterIP
# services, port 53 -> 5353: race 198.19.255.20, empty .21, moved .22, restart .23.
# The cases (svcproxy in watch mode throughout; "within 2 s" counts from the end of the
# sync that made the change: its "synced ... ipvs_ops=N" line, N > 0, with ipvsadm
# showing the change; each send that goes unanswered costs about 0.9 s):
#   1. boot race: the client sends to race's ClusterIP before svcproxy ran; conntrack
#      caches the flow un-NATed (checked); svcproxy's first sync gives race pod1, which
#      must answer within 2 s.
#   2. zero -> one: empty has no endpoint (no answer), then pod1: answers within 2 s.
#   3. replaced while running: moved's pod1 (answering) replaced by pod2: within 2 s.
#   4. restart, nothing changed: the flow to restart (pod1 and pod2) stays on its pod,
#      and its conntrack entry outlives the restarted process's first sync.
#   5. removed while down: svcproxy stopped, that pod removed from the files (it still
#      answers), svcproxy started: the other pod answers within 2 s.
set -u
if [ -z "${PASS+x}" ]; then
  S=$1; PASS=0; FAIL=0; UDP_ALONE=1
  ok() { echo "ok $1"; PASS=$((PASS + 1)); }
  bad() { echo "FAIL $1: $2"; FAIL=$((FAIL + 1)); }
  t() { cut -d' ' -f1 /proc/uptime; }
fi
U=/tmp/udp
mkdir -p $U/files
u_t0=$(t)
un() { ip netns exec unode "$@"; }
uwait() { # a shell condition; polls it every 0.2 s, at most 300 times (60 s)
  k=0
  while [ $k -lt 300 ]; do if eval "$1"; then return 0; fi; sleep 0.2; k=$((k + 1)); done
  return 1
}

# ---- the node: a dummy eth0 with the default route (an un-NATed ClusterIP packet leaves
# through it and is silently dropped, so conntrack confirms its flow), forwarding, and a
# test-owned conntrack rule so conntrack tracks the namespace before any svcproxy rule.
ip netns add unode
ip -n unode link set lo up
ip -n unode link add eth0 type dummy
ip -n unode addr add 192.168.20.11/24 dev eth0
ip -n unode link set eth0 up
ip -n unode route add default dev eth0
un sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
un iptables-legacy -A FORWARD -m conntrack --ctstate NEW -m comment --comment "udp test: conntrack on" -j ACCEPT
i=1
for ns in upod1 upod2 uclient; do
  ip netns add $ns
  ip link add u-$ns type veth peer name eth0 netns $ns
  ip link set u-$ns netns unode
  ip -n unode addr add 198.19.0.$i/32 dev u-$ns
  ip -n unode link set u-$ns up
  ip -n unode route add 198.18.$i.2/32 dev u-$ns
  ip -n $ns link set lo up
  ip -n $ns addr add 198.18.$i.2/32 dev eth0
  ip -n $ns link set eth0 up
  ip -n $ns route add 198.19.0.$i/32 dev eth0 scope link
  ip -n $ns route add default via 198.19.0.$i dev eth0 onlink
  i=$((i + 1))
done
for p in 1 2; do
  ip netns exec upod$p socat UDP4-RECVFROM:5353,bind=198.18.$p.2,fork EXEC:"echo pod$p" </dev/null >/dev/null 2>&1 &
done

# ---- the cluster state: header, then one service and slice per argument ------------
usvc() { # NAME VIP PODS (comma list, - for none)
  printf -- '---\napiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: udp}\n' "$1"
  printf 'spec:\n  type: ClusterIP\n  clusterIP: %s\n  clusterIPs: [%s]\n  ipFamilies: [IPv4]\n' "$2" "$2"
  printf '  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 5353}]\n'
  printf -- '---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-1\n  namespace: udp\n' "$1"
  printf '  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\n' "$1"
  printf 'ports: [{name: dns, port: 5353, protocol: UDP}]\n'
  if [ "$3" = - ]; then echo 'endpoints: []'; return; fi
  echo 'endpoints:'
  for p in $(echo "$3" | tr , ' '); do
    printf -- '- addresses: [198.18.%s.2]\n  conditions: {ready: true, serving: true, terminating: false}\n  nodeName: vm-node\n' "${p#pod}"
  done
}
ustate() { # RACE EMPTY MOVED RESTART: each a PODS list
  { printf 'apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode:\n  name: vm-node\n  ips: [192.168.20.11]\n'
    printf 'options:\n  ipFamily: ipv4\n  clusterCIDR: 198.18.0.0/16\n  detectLocalMode: ClusterCIDR\n'
    usvc race 198.19.255.20 "$1"; usvc empty 198.19.255.21 "$2"; usvc moved 198.19.255.22 "$3"; usvc restart 198.19.255.23 "$4"
  } >$U/files/.next && mv $U/files/.next $U/files/cluster.yaml
}
ustart() { # LOG: svcproxy in watch mode in the node namespace (whose nf_conntrack_max is
  # read-only: --conntrack-max-per-core 0 leaves it, as kind and k3s do)
  SVCPROXY_IPVS_GRACE_FILE=$U/ipvs-terminating ip netns exec unode "$S" sync --watch --mode ipvs --iptables-backend legacy \
    --from $U/files --min-sync-period 100ms --sync-period 2s --conntrack-max-per-core 0 \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 2>"$1" &
  UW=$!
}
ustop() { kill -TERM $UW 2>/dev/null; wait $UW; }

# ---- the client, the kernel's view, and the 2 s check ------------------------------
ask() { # VIP: one datagram from 198.18.3.2:40000 to VIP:53; prints who answered, or none
  a=$(echo ping | ip netns exec uclient timeout 3 socat -T1 -t0.7 - UDP4:$1:53,sourceport=40000,reuseaddr 2>/dev/null | head -1)
  echo "${a:-none}"
}
urs() { # VIP: the real servers of the IPVS service VIP:53/udp
  un ipvsadm -Ln -u "$1:53" 2>/dev/null | awk '$1=="->" && $2 ~ /^[0-9]/ {print $2}' | sort | tr '\n' ' ' | sed 's/ $//'
}
addr() { echo "198.18.${1#pod}.2:5353"; }
uchanged() { cat "$1" 2>/dev/null | grep -c 'synced.*ipvs_ops=[1-9]'; } # LOG: syncs that changed IPVS
usync() { # LOG VIP RS N0: waits (bounded) for a sync logged after N0 that changed IPVS, with
  # VIP's real servers RS in the kernel; sets T0 then
  uwait "[ \"\$(uchanged $1)\" -gt $4 ] && [ \"\$(urs $2)\" = \"$3\" ]" && T0=$(t)
}
ucheck() { # VIP: the conntrack flows of the client's port and IPVS's connections to VIP
  echo "  conntrack (node):"; un conntrack -L -p udp 2>/dev/null | grep -E "dport=40000|sport=40000" | sed 's/^/    /'
  echo "  conntrack -S: $(un conntrack -S 2>/dev/null | awk '{for(i=2;i<=NF;i++) if ($i !~ /=0$/) printf "%s ", $i}')"
  echo "  ipvsadm -Lnc:"; un ipvsadm -Lnc 2>/dev/null | grep -F "$1:53" | sed 's/^/    /'
  echo "  client: UDP datagrams to no socket (NoPorts): $(ip netns exec uclient awk '$1=="Udp:" && $2 ~ /^[0-9]/ {print $3}' /proc/net/snmp)"
}
within() { # NAME VIP WANT T0: sends until WANT answers; passes if a send begun less than
  # 2 s after T0 is answered by WANT (at most 8 sends)
  seen=""; k=0; got=0
  while [ $k -lt 8 ]; do
    off=$(awk -v a="$(t)" -v b="$4" 'BEGIN{printf "%.2f", a - b}')
    awk -v o="$off" 'BEGIN{exit !(o >= 2)}' && break
    who=$(ask "$2"); seen="$seen +${off}s:$who"; k=$((k + 1))
    if [ "$who" = "$3" ]; then got=1; break; fi
  done
  if [ $got = 1 ]; then ok "$1 (sends after the change:$seen)"
  else bad "$1" "not answered by $3 within 2 s; sends after the change:$seen
$(ucheck "$2")"; fi
}

# ---- case 1: the boot race ---------------------------------------------------------
RACE=198.19.255.20; EMPTY=198.19.255.21; MOVED=198.19.255.22; RESTART=198.19.255.23
before="$(ask $RACE) $(ask $RACE)"
flow=$(un conntrack -L -p udp --orig-dst $RACE 2>/dev/null)
if [ "$before" = "none none" ] && echo "$flow" | grep -q "src=198.18.3.2 dst=$RACE sport=40000 dport=53 .*src=$RACE dst=198.18.3.2 sport=53 dport=40000"; then
  ok "udp 1: before any rule, the client's flow to a ClusterIP is cached un-NATed: $(echo $flow)"
else bad "udp 1: un-NATed flow cached before any rule" "sends: $before; conntrack: $flow"; fi
ustate pod1 - pod1 pod1,pod2
ustart $U/watch-1.log
if usync $U/watch-1.log $RACE "$(addr pod1)" 0; then
  within "udp 1: boot race: the un-NATed flow is answered by the endpoint after the first sync" $RACE pod1 "$T0"
else bad "udp 1: boot race" "the first sync never programmed $RACE: $(un ipvsadm -Ln; tail -5 $U/watch-1.log)"; fi

# ---- case 2: zero -> one -----------------------------------------------------------
before="$(ask $EMPTY) $(ask $EMPTY)"
if [ "$before" != "none none" ]; then bad "udp 2: zero -> one" "answered with no endpoint: $before"
else
  n0=$(uchanged $U/watch-1.log); ustate pod1 pod1 pod1 pod1,pod2
  if usync $U/watch-1.log $EMPTY "$(addr pod1)" "$n0"; then
    within "udp 2: zero -> one endpoint, the flow is answered" $EMPTY pod1 "$T0"
  else bad "udp 2: zero -> one" "never programmed: $(un ipvsadm -Ln; tail -5 $U/watch-1.log)"; fi
fi

# ---- case 3: replaced while running -------------------------------------------------
before="$(ask $MOVED) $(ask $MOVED)"
if [ "$before" != "pod1 pod1" ]; then bad "udp 3: replaced while running" "not on pod1 before: $before"
else
  n0=$(uchanged $U/watch-1.log); ustate pod1 pod1 pod2 pod1,pod2
  if usync $U/watch-1.log $MOVED "$(addr pod2)" "$n0"; then
    within "udp 3: pod1 replaced by pod2 while running (pod1 still answers), the flow moves" $MOVED pod2 "$T0"
  else bad "udp 3: replaced while running" "never programmed: $(un ipvsadm -Ln; tail -5 $U/watch-1.log)"; fi
fi

# ---- cases 4 and 5: restarts ---------------------------------------------------------
on=$(ask $RESTART); again=$(ask $RESTART)
ustop
ustart $U/watch-2.log
if [ "$on" != pod1 ] && [ "$on" != pod2 ] || [ "$again" != "$on" ]; then bad "udp 4: restart, nothing changed" "no steady flow before: $on $again"
elif ! uwait 'grep -qs "synced kind=" $U/watch-2.log'; then bad "udp 4: restart, nothing changed" "no sync: $(tail -5 $U/watch-2.log)"
else
  # The first sync kept the flow's conntrack entry (its reply source serves), and the
  # flow's next sends are answered by the same pod. (The entry's reply port need not be
  # 40000: flows from 40000 to two services DNATed to one pod get distinct ports.)
  kept=$(un conntrack -L -p udp --orig-dst $RESTART 2>/dev/null | grep "sport=40000 dport=53 .*src=198.18.${on#pod}.2 dst=198.18.3.2 sport=5353 ")
  after="$(ask $RESTART) $(ask $RESTART) $(ask $RESTART)"
  if [ -n "$kept" ] && [ "$after" = "$on $on $on" ]; then ok "udp 4: restart with nothing changed, the flow (and its conntrack entry) stays on $on"
  else bad "udp 4: restart, nothing changed" "was on $on; entry after the first sync: '$kept'; sends after the restart: $after
$(ucheck $RESTART)"; fi
fi
ustop
if [ "$on" = pod1 ]; then other=pod2; else other=pod1; fi
ustate pod1 pod1 pod2 $other
ustart $U/watch-3.log
if usync $U/watch-3.log $RESTART "$(addr $other)" 0; then
  within "udp 5: $on removed while svcproxy was down (it still answers), the flow moves to $other" $RESTART $other "$T0"
else bad "udp 5: removed while down" "never programmed: $(un ipvsadm -Ln; tail -5 $U/watch-3.log)"; fi
ustop
echo "udp: the UDP cases took $(awk -v a="$(t)" -v b="$u_t0" 'BEGIN{printf "%.1f", a - b}') s in the guest"

if [ "${UDP_ALONE:-0}" = 1 ]; then
  echo "guest: $PASS passed, $FAIL failed"
  [ $FAIL = 0 ]
fi
