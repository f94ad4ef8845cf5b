# Shared by scripts/bench and scripts/bench-kernel (sourced, not run).

RESULTS=${SVCPROXY_BENCH_RESULTS:-target/bench-results}
BENCHMARKS=BENCHMARKS.md
BEGIN_MARK='<!-- results: written by scripts/bench from the benchmark output; edits here are overwritten -->'
END_MARK='<!-- end of results -->'

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 2; }

# The release binaries: BIN, the node binary as shipped (built unless SVCPROXY_BIN names
# one), and BENCH_BIN, the benchmark tooling (`generate`, `bench …`; built with the
# `bench` feature unless SVCPROXY_BENCH_BIN names one).
release_binary() {
  export PATH="$HOME/.cargo/bin:$PATH"
  if [ -n "${SVCPROXY_BIN:-}" ]; then
    BIN=$SVCPROXY_BIN
  else
    cargo build --release --quiet --bin svcproxy
    BIN=target/release/svcproxy
  fi
  if [ -n "${SVCPROXY_BENCH_BIN:-}" ]; then
    BENCH_BIN=$SVCPROXY_BENCH_BIN
  else
    cargo build --release --quiet --features bench --bin svcproxy-bench
    BENCH_BIN=target/release/svcproxy-bench
  fi
  [ -x "$BIN" ] || die "no svcproxy binary at $BIN"
  [ -x "$BENCH_BIN" ] || die "no svcproxy-bench binary at $BENCH_BIN"
}

# Sets or replaces `key: value` in $RESULTS/machine.txt.
machine_set() {
  local file=$RESULTS/machine.txt key=$1 value=$2
  touch "$file"
  grep -v -F "$key: " "$file" > "$file.new" || true
  printf '%s: %s\n' "$key" "$value" >> "$file.new"
  mv "$file.new" "$file"
}

# The commit measured (with -dirty when the working tree differs from it).
commit() {
  local c
  c=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
  git diff --quiet HEAD -- src benches Cargo.toml Cargo.lock 2> /dev/null || c="$c-dirty"
  echo "$c"
}

# The machine, as BENCHMARKS.md reports it.
machine_describe() {
  local cpu
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  machine_set cpu "${cpu:-unknown} ($(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo))"
  machine_set kernel "$(uname -sr)"
  machine_set iptables "$( (iptables-nft --version 2>/dev/null || echo 'iptables-nft: none'; iptables-legacy --version 2>/dev/null || echo 'iptables-legacy: none') | paste -sd ';' | sed 's/;/; /')"
  machine_set rustc "$(rustc --version 2>/dev/null || echo unknown)"
}

# Writes the results section of BENCHMARKS.md from everything in $RESULTS.
write_report() {
  local section
  section=$(mktemp)
  "$BENCH_BIN" report --criterion target/criterion --results "$RESULTS" > "$section"
  [ -f "$BENCHMARKS" ] || die "$BENCHMARKS is missing"
  grep -q -F "$BEGIN_MARK" "$BENCHMARKS" || die "$BENCHMARKS has no results markers"
  awk -v begin="$BEGIN_MARK" -v end="$END_MARK" -v section="$section" '
    $0 == begin { print; while ((getline line < section) > 0) print line; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }
  ' "$BENCHMARKS" > "$BENCHMARKS.new"
  mv "$BENCHMARKS.new" "$BENCHMARKS"
  rm -f "$section"
  log "wrote the results into $BENCHMARKS"
}
