#!/usr/bin/awk -f
# The IPVS soak's figures per mode and IPVS / iptables ratios, from the samples
# tests/rigs/ipvs-guest-soak.sh prints (its `soak` lines without the prefix):
#   MODE first|change|rss|idle|syncs ...
# Percentiles are nearest-rank over the changes that were synced (timeouts are counted).
function pct(arr, n, p,   i, j, t, k) {
  if (n == 0) return "-"
  for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
  k = int(p * n + 0.999999); if (k < 1) k = 1; if (k > n) k = n
  return arr[k]
}
function ratio(a, b) { return (a == "-" || b == "-" || b + 0 == 0) ? "-" : sprintf("%.2fx", a / b) }
BEGIN { FS = "\t" }
$2 == "first" { first[$1] = $3; firstsync[$1] = $4; firstlines[$1] = $5; firstops[$1] = $6 }
$2 == "change" && $4 == "timeout" { timeouts[$1]++ }
# a sync that sent nothing (no restore line, no IPVS operation) was not the change's: a
# periodic sync that ran just after it (samples of the first rig version)
$2 == "change" && $4 != "timeout" && $7 == 0 && $8 == 0 { unattributed[$1]++; next }
$2 == "change" && $4 != "timeout" {
  n = ++nc[$1]; lat[$1, n] = $4; sec[$1, n] = $6
  if ($5 == "Full") cfull[$1]++
}
$2 == "rss" { if ($4 > rmax[$1]) rmax[$1] = $4; rlast[$1] = $4; rn[$1]++ }
$2 == "idle" { idle[$1] = $3 / ($4 * $5) * 100 }
$2 == "syncs" { full[$1] = $3; partial[$1] = $4 }
END {
  for (m in nc) {
    delete a; delete b
    for (i = 1; i <= nc[m]; i++) { a[i] = lat[m, i]; b[i] = sec[m, i] }
    p50[m] = pct(a, nc[m], 0.5); p99[m] = pct(a, nc[m], 0.99); mx[m] = pct(a, nc[m], 1)
    s50[m] = pct(b, nc[m], 0.5); s99[m] = pct(b, nc[m], 0.99)
  }
  printf "%-52s %14s %14s %10s\n", "", "ipvs", "iptables", "ipvs/ipt"
  row("first (full) sync: launch -> synced line (s)", first["ipvs"], first["iptables"])
  row("first sync: the synced line's seconds", f3(firstsync["ipvs"]), f3(firstsync["iptables"]))
  row("change -> synced p50 (s)", p50["ipvs"], p50["iptables"])
  row("change -> synced p99 (s)", p99["ipvs"], p99["iptables"])
  row("change -> synced max (s)", mx["ipvs"], mx["iptables"])
  row("a change's sync: seconds p50", f3(s50["ipvs"]), f3(s50["iptables"]))
  row("a change's sync: seconds p99", f3(s99["ipvs"]), f3(s99["iptables"]))
  row("RSS max (MiB)", mib(rmax["ipvs"]), mib(rmax["iptables"]))
  row("RSS last sample (MiB)", mib(rlast["ipvs"]), mib(rlast["iptables"]))
  row("CPU over the idle period (% of a core)", fmt(idle["ipvs"]), fmt(idle["iptables"]))
  printf "%-52s %14s %14s\n", "synced changes / timeouts / unattributed", (nc["ipvs"] + 0) " / " (timeouts["ipvs"] + 0) " / " (unattributed["ipvs"] + 0), (nc["iptables"] + 0) " / " (timeouts["iptables"] + 0) " / " (unattributed["iptables"] + 0)
  printf "%-52s %14s %14s\n", "syncs in the run: full / partial", (full["ipvs"] + 0) " / " (partial["ipvs"] + 0), (full["iptables"] + 0) " / " (partial["iptables"] + 0)
  printf "%-52s %14s %14s\n", "first sync: restore lines / ipvs ops", firstlines["ipvs"] " / " firstops["ipvs"], firstlines["iptables"] " / " firstops["iptables"]
  printf "%-52s %14s %14s\n", "RSS samples", rn["ipvs"] + 0, rn["iptables"] + 0
}
function mib(kb) { return kb == "" ? "-" : sprintf("%.1f", kb / 1024) }
function f3(x) { return (x == "" || x == "-") ? "-" : sprintf("%.3f", x) }
function fmt(x) { return x == "" ? "-" : sprintf("%.2f", x) }
function row(name, a, b) { if (a == "") a = "-"; if (b == "") b = "-"; printf "%-52s %14s %14s %10s\n", name, a, b, ratio(a, b) }
