#!/bin/sh
# nlmon-capture.sh — guest script for tests/rigs/ipvs-vm.sh: records the netlink traffic
# of a few ipvsadm commands (requests and the kernel's replies) with nlmon and
# prints the capture as base64 between PCAP-BEGIN/PCAP-END. This is where the
# "from ipvsadm" and "from kernel" bytes of src/ipvs/netlink/msg_tests.rs came from.
#
#   EXTRA_MODULES=nlmon EXTRA_FILES=/usr/bin/tcpdump tests/rigs/ipvs-vm.sh tests/rigs/nlmon-capture.sh >out.txt
#   sed -n '/^PCAP-BEGIN$/,/^PCAP-END$/p' out.txt | sed '1d;$d' | base64 -d >ipvs.pcap
#   tcpdump -r ipvs.pcap -xx    # 16-byte cooked header, then the netlink message(s)
#
# (host: apt-get install -y tcpdump; the IPVS family id is in the replies' nlmsg_type)
set -e
echo "root:x:0:0:root:/:/bin/sh" >/etc/passwd
echo "root:x:0:" >/etc/group
ip link add nl0 type nlmon
ip link set nl0 up
tcpdump -Z root -U -i nl0 -w /tmp/ipvs.pcap 2>/tmp/tcpdump.err &
TCPDUMP=$!
sleep 2
step() { echo "STEP $*"; "$@"; sleep 0.3; }
step ipvsadm -C
step ipvsadm -A -t 10.0.0.1:80 -s rr
step ipvsadm -a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 1
step ipvsadm -A -u 10.0.0.1:53 -s sh -p 10800
step ipvsadm -A --sctp-service 10.0.0.2:3868 -s rr
step ipvsadm -A -t [2001:db8::1]:443 -s rr -p 300
step ipvsadm -a -t [2001:db8::1]:443 -r [2001:db8::10]:8443 -m -w 0
step ipvsadm -A -t 10.0.0.3:80 -s rr -p 60 -M 255.255.255.0
step ipvsadm -e -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 0
step ipvsadm -E -t 10.0.0.1:80 -s wrr
step ipvsadm -d -t 10.0.0.1:80 -r 10.1.0.1:8080
step ipvsadm --set 1000 100 200
step ipvsadm -L --timeout
step ipvsadm -Sn
step ipvsadm -D -t 10.0.0.3:80
sleep 1
kill "$TCPDUMP"
wait "$TCPDUMP" || true
cat /tmp/tcpdump.err
echo PCAP-BEGIN
base64 /tmp/ipvs.pcap
echo PCAP-END
