#!/usr/bin/env bash
# ipvs-vm.sh — run one program as root inside a throwaway QEMU VM whose kernel
# has IPVS, print what it printed, and exit with its exit status.
#
# Why: IPVS (and dummy links) need kernel modules that CI hosts often lack.
# The VM boots Debian's own kernel (ip_vs as modules) with a tiny busybox
# initramfs, runs the program, and powers off. Everything happens in one boot.
# The guest has NO network device (-nic none): nothing leaves the VM.
#
# Usage:  tests/rigs/ipvs-vm.sh [PROGRAM [ARGS...]]
#         No PROGRAM: a built-in ipvsadm self-test.
#         PROGRAM is an ELF binary (static, or dynamic: its libraries are copied
#         in via ldd) or a shell script (run with dash; iproute2 `ip`, `ipvsadm`
#         and busybox applets are on PATH). It runs as root in /tmp of the guest.
# Env:    ACCEL=auto|kvm|tcg   auto: kvm only if the CPU shows vmx/svm, else tcg
#         VM_MEM=512 (MiB)     VM_TIMEOUT=300 (s, hard limit on the whole VM)
#         EXTRA_MODULES="ip_set xt_..."  more kernel modules to load in the guest
#         EXTRA_FILES="/path/a /path/b"  more host files copied to the same path
#         VM_CACHE=/tmp/ipvs-vm-cache    where a downloaded kernel is kept
#         KERNEL_SOURCE=auto|apt  apt: ignore an installed kernel, use apt-get download
#         KERNEL_SERIES=6.12  boot that Debian kernel series instead: the newest package
#                      linux-image-SERIES.N(-ABI|+debN)-amd64-unsigned apt knows (no cloud,
#                      rt or dbg flavour), fetched like linux-image-amd64's, never an
#                      installed kernel; KERNEL_PACKAGE=NAME names the package outright.
#                      No such package, or its download fails: missing (see SKIP_MISSING).
#         SKIP_MISSING=1  missing host tools: print SKIP loudly and exit 77
#         VERBOSE=1  show the whole serial console
# Exit:   0..76  the program's own exit status, from the guest
#         77     skipped: a host tool is missing and SKIP_MISSING=1
#         89     the program exited with 77 or more (printed), kept apart from the rig's codes
#         90     rig failure before boot (missing tool, no kernel, bad input)
#         91     the guest never reported an exit status (crash, panic, hang)
#         92     the hard timeout VM_TIMEOUT killed the VM
# Needs (Debian 12): apt-get install -y --no-install-recommends \
#           qemu-system-x86 busybox-static ipvsadm kmod cpio
#         and a Debian kernel: linux-image-amd64 installed, or fetched here with
#         `apt-get download` + `dpkg-deb -x` into VM_CACHE (no postinst, no initrd).
set -euo pipefail

ACCEL=${ACCEL:-auto}
VM_MEM=${VM_MEM:-512}
VM_TIMEOUT=${VM_TIMEOUT:-300}
VM_CACHE=${VM_CACHE:-/tmp/ipvs-vm-cache}
MODULES="ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_sh ip_vs_dh ip_vs_sed ip_vs_nq ip_vs_mh dummy veth nf_conntrack ${EXTRA_MODULES:-}"

die() { echo "ipvs-vm: RIG FAILURE: $*" >&2; exit 90; }
missing() {
  if [ "${SKIP_MISSING:-0}" = 1 ]; then
    echo "ipvs-vm: SKIP: $* — IPVS VM tests NOT RUN" >&2; exit 77
  fi
  die "$*"
}
trap 'echo "ipvs-vm: RIG FAILURE at line $LINENO: $BASH_COMMAND" >&2' ERR
t_start=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - t_start) / 1000000 )); }

command -v qemu-system-x86_64 >/dev/null || missing "qemu-system-x86_64 missing (apt-get install -y qemu-system-x86)"
[ -x /bin/busybox ] || missing "busybox missing (apt-get install -y busybox-static)"
command -v ipvsadm >/dev/null || missing "ipvsadm missing (apt-get install -y ipvsadm)"
command -v cpio >/dev/null || missing "cpio missing (apt-get install -y cpio)"
command -v modprobe >/dev/null || missing "modprobe missing (apt-get install -y kmod)"
mkdir -p "$VM_CACHE"

# ---- 1. a Debian kernel with ip_vs modules -------------------------------
find_kernel() {
  local root=$1 v
  for v in $(ls "$root"/lib/modules 2>/dev/null | sort -V -r); do
    # Modules may be compressed (.ko.xz from 6.12 on); step 2 decompresses them.
    if [ -f "$root/boot/vmlinuz-$v" ] && ls "$root/lib/modules/$v/kernel/net/netfilter/ipvs/ip_vs.ko"* >/dev/null 2>&1; then
      KROOT=$root KVER=$v; return 0
    fi
  done
  return 1
}
extract_kernel() { # PACKAGE ROOT FAIL: apt-get download (unless cached) + dpkg-deb -x; FAIL is die or missing
  local pkg=$1 root=$2 fail=$3
  ls "$VM_CACHE/${pkg}"_*.deb >/dev/null 2>&1 ||
    (cd "$VM_CACHE" && apt-get download "$pkg" >/dev/null 2>&1) || $fail "apt-get download $pkg failed (no network, or no apt source for it)"
  # Unpacked beside, then renamed into place: a run beside this one (VM_CACHE is shared)
  # sees the whole tree or none; if it got there first, its tree serves.
  local tmp
  tmp=$(mktemp -d "$VM_CACHE/.unpack.XXXXXX")
  dpkg-deb -x "$(ls "$VM_CACHE/${pkg}"_*.deb | sort -V | tail -1)" "$tmp" || { rm -rf "$tmp"; die "dpkg-deb -x $pkg failed"; }
  find_kernel "$root" || { rm -rf "$root"; mv -T "$tmp" "$root" 2>/dev/null || true; }
  rm -rf "$tmp"
  find_kernel "$root" || die "no kernel with ip_vs in $pkg"
}
fetch_kernel() {
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$pkg" ] || die "cannot resolve linux-image-amd64 (run apt-get update)"
  extract_kernel "$pkg" "$VM_CACHE/kroot" die
}
series_package() { # SERIES: the newest unsigned amd64 image of that series apt knows
  local re
  re="^linux-image-${1//./\\.}\\.[0-9.]+(-[0-9]+|\\+deb[0-9]+)-amd64-unsigned\$"
  apt-cache search --names-only "$re" 2>/dev/null | awk '{print $1}' | sort -V | tail -1
}
if [ -n "${KERNEL_SERIES:-}${KERNEL_PACKAGE:-}" ]; then
  if [ -z "${KERNEL_PACKAGE:-}" ]; then
    [[ $KERNEL_SERIES =~ ^[0-9]+\.[0-9]+$ ]] || die "KERNEL_SERIES must look like 6.12, not '$KERNEL_SERIES'"
    KERNEL_PACKAGE=$(series_package "$KERNEL_SERIES")
    [ -n "$KERNEL_PACKAGE" ] || missing "apt knows no linux-image-$KERNEL_SERIES.*-amd64-unsigned (bookworm-security in the apt sources? apt-get update?)"
  fi
  [[ $KERNEL_PACKAGE =~ ^[a-z0-9][a-z0-9.+-]*$ ]] || die "bad KERNEL_PACKAGE '$KERNEL_PACKAGE'"
  # One directory per package: a newer one is fetched beside, never over, a cached one;
  # once it is there, the series' older packages go (each a whole kernel's modules).
  if ! find_kernel "$VM_CACHE/kroot-$KERNEL_PACKAGE"; then
    extract_kernel "$KERNEL_PACKAGE" "$VM_CACHE/kroot-$KERNEL_PACKAGE" missing
    if [ -n "${KERNEL_SERIES:-}" ]; then
      for old in "$VM_CACHE/kroot-linux-image-$KERNEL_SERIES."* "$VM_CACHE/linux-image-$KERNEL_SERIES."*.deb; do
        case $old in "$VM_CACHE/kroot-$KERNEL_PACKAGE" | "$VM_CACHE/${KERNEL_PACKAGE}_"*) ;; *) rm -rf "$old" ;; esac
      done
    fi
  fi
  echo "ipvs-vm: kernel package $KERNEL_PACKAGE ($KVER)" >&2
# KERNEL_SOURCE=apt skips an installed kernel (what a fresh CI machine sees)
elif ! { [ "${KERNEL_SOURCE:-auto}" != apt ] && find_kernel ""; } && ! find_kernel "$VM_CACHE/kroot"; then
  fetch_kernel
fi
KERNEL=$KROOT/boot/vmlinuz-$KVER
MODDIR=$KROOT/lib/modules/$KVER
# a .deb extracted with dpkg-deb has no modules.dep (depmod runs in postinst)
[ -f "$MODDIR/modules.dep" ] || depmod -b "${KROOT:-/}" "$KVER" || die "depmod failed"
[ -r "$KERNEL" ] || die "cannot read $KERNEL"

# ---- 2. initramfs ---------------------------------------------------------
WORK=$(mktemp -d /tmp/ipvs-vm.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
R=$WORK/root
mkdir -p "$R"/{bin,sbin,proc,sys,dev,tmp,run,etc,lib64,lib/x86_64-linux-gnu,mods}
cp /bin/busybox "$R/bin/busybox"

copy_with_libs() { # copy an ELF (or script) and its shared libraries to the same paths
  local f=$1 dst=${2:-$1} lib
  mkdir -p "$R$(dirname "$dst")"
  cp -L "$f" "$R$dst"
  if ldd "$f" >/dev/null 2>&1; then
    for lib in $(ldd "$f" | grep -o '/[^ ]*'); do
      [ -e "$R$lib" ] && continue
      mkdir -p "$R$(dirname "$lib")"; cp -L "$lib" "$R$lib"
    done
  fi
}
copy_with_libs "$(command -v ipvsadm)" /sbin/ipvsadm
copy_with_libs "$(command -v ip)" /sbin/ip   # iproute2: busybox ip has no netns/veth-peer-netns
# scripts run under dash, not busybox sh: Debian's static busybox sh prefers its
# own applets over PATH, so a script calling `ip` would get busybox's ip.
copy_with_libs /bin/dash /bin/dash
for f in ${EXTRA_FILES:-}; do [ -e "$f" ] || die "EXTRA_FILES: no $f"; copy_with_libs "$f"; done

# kernel modules in dependency order (resolved on the host with modprobe -D)
if ls "$MODDIR"/kernel/net/netfilter/ipvs/ip_vs.ko.xz >/dev/null 2>&1; then
  command -v xz >/dev/null || missing "xz missing: $KVER's modules are .ko.xz (apt-get install -y xz-utils)"
elif ls "$MODDIR"/kernel/net/netfilter/ipvs/ip_vs.ko.zst >/dev/null 2>&1; then
  command -v zstd >/dev/null || missing "zstd missing: $KVER's modules are .ko.zst (apt-get install -y zstd)"
fi
: >"$R/mods/order"
for m in $MODULES; do
  modprobe -d "${KROOT:-/}" -S "$KVER" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
  # busybox insmod takes a plain ELF object: compressed modules are unpacked here
  b=$(basename "$ko"); b=${b%.xz}; b=${b%.zst}
  case $ko in
    *.ko.xz) xz -dc "$ko" >"$R/mods/$b" || die "xz -d $ko (apt-get install xz-utils)" ;;
    *.ko.zst) zstd -dcq "$ko" >"$R/mods/$b" || die "zstd -d $ko (apt-get install zstd)" ;;
    *) cp "$ko" "$R/mods/$b" ;;
  esac
  echo "$b" >>"$R/mods/order"
done
[ -s "$R/mods/order" ] || die "no modules resolved for $KVER"

# the program to run
if [ $# -gt 0 ]; then
  PROG=$1; shift
  [ -f "$PROG" ] || PROG=$(command -v "$PROG") || die "no such program: $PROG"
  copy_with_libs "$PROG" /prog/"$(basename "$PROG")"
  { printf '#!/bin/sh\ncd /tmp\n'
    if head -c2 "$PROG" | grep -q '#!'; then printf 'exec /bin/dash /prog/%q' "$(basename "$PROG")"
    else printf 'exec /prog/%q' "$(basename "$PROG")"; fi
    for a in "$@"; do printf ' %q' "$a"; done; printf '\n'; } >"$R/run.sh"
else
  cat >"$R/run.sh" <<'EOF'
#!/bin/dash
set -e
echo "kernel $(uname -r); IPVS: $(head -1 /proc/net/ip_vs)"
ip link add kube-ipvs0 type dummy
ip addr add 198.19.255.10/32 dev kube-ipvs0
ipvsadm -A -t 198.19.255.10:80 -s rr
ipvsadm -a -t 198.19.255.10:80 -r 198.18.1.2:8080 -m -w 1
ipvsadm -a -t 198.19.255.10:80 -r 198.18.2.2:8080 -m -w 1
ipvsadm -A -u 198.19.255.10:53 -s sh -p 10800
ipvsadm -a -u 198.19.255.10:53 -r 198.18.1.2:53 -m
ipvsadm -A -f 100 -s wrr
ipvsadm -Ln
ipvsadm -L --timeout
ipvsadm -C
echo "services after flush: $(tail -n +4 /proc/net/ip_vs | wc -l)"
EOF
fi
chmod +x "$R/run.sh"

cat >"$R/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
for m in $(cat /mods/order); do insmod /mods/$m 2>/dev/null || echo "insmod $m failed"; done
ip link set lo up
echo "===VM-BEGIN==="
/bin/dash /run.sh; rc=$?
echo "===VM-END rc=$rc==="
poweroff -f
EOF
chmod +x "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1 >"$WORK/initrd.gz")
t_built=$(ms)

# ---- 3. boot --------------------------------------------------------------
# KVM only with real VT-x/AMD-V: a paravirtual /dev/kvm (kvm-pvm, for nested
# use) opens fine but cannot run a stock Debian kernel, so auto = kvm only when
# the CPU flags show vmx/svm.
kvm_ok() { [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; }
case "$ACCEL" in
  auto) if kvm_ok; then ACCEL=kvm; else ACCEL=tcg; fi ;;
  kvm|tcg) ;;
  *) die "ACCEL must be auto|kvm|tcg" ;;
esac
if [ "$ACCEL" = kvm ]; then CPU=host; else CPU=max; fi
set +e
timeout --kill-after=5 "$VM_TIMEOUT" qemu-system-x86_64 \
  -accel "$ACCEL" -cpu "$CPU" -m "$VM_MEM" -smp 1 \
  -nodefaults -no-user-config -display none -nic none -no-reboot \
  -serial stdio -kernel "$KERNEL" -initrd "$WORK/initrd.gz" \
  -append "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init" \
  </dev/null >"$WORK/console.log" 2>"$WORK/qemu.err"
qrc=$?
set -e
t_done=$(ms)
[ "${VERBOSE:-0}" = 1 ] && { cat "$WORK/console.log"; cat "$WORK/qemu.err" >&2; }
tr -d '\r' <"$WORK/console.log" | sed -n '/^===VM-BEGIN===$/,/^===VM-END rc=/p' | sed '1d;$d'
rc=$(tr -d '\r' <"$WORK/console.log" | sed -n 's/^===VM-END rc=\([0-9]*\)===$/\1/p' | tail -1)
echo "ipvs-vm: accel=$ACCEL kernel=$KVER initramfs=$(du -k "$WORK/initrd.gz" | cut -f1)KiB build=${t_built}ms vm=$((t_done - t_built))ms total=${t_done}ms qemu_rc=$qrc" >&2
if [ -z "$rc" ]; then
  tail_console() { tr -d '\r' <"$WORK/console.log" | tail -20 >&2; cat "$WORK/qemu.err" >&2; }
  if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    echo "ipvs-vm: RIG FAILURE: hard timeout after ${VM_TIMEOUT}s (VM_TIMEOUT); console tail:" >&2
    tail_console; exit 92
  fi
  echo "ipvs-vm: RIG FAILURE: no end marker (qemu rc $qrc); console tail:" >&2
  tail_console; exit 91
fi
if [ "$rc" -ge 77 ]; then
  echo "ipvs-vm: the program exited $rc; reported as 89 so it cannot pass for a rig code" >&2
  exit 89
fi
exit "$rc"
