# What `CI` means (sourced, not run): the same rule as tests/support/ci.rs, which every
# test tier uses; tests/cli.rs checks that the two agree. Set to anything but empty, `0`
# or `false` (any case, spaces ignored) means CI: skips are failures, goldens are never
# blessed.
under_ci() {
  local v
  v=$(printf '%s' "${CI:-}" | tr -d '[:space:]' | tr '[:upper:]' '[:lower:]')
  [ -n "$v" ] && [ "$v" != 0 ] && [ "$v" != false ]
}
