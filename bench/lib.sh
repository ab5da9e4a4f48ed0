# Shared by the benchmark scripts (sourced): timing and ratios. Never a timed test: these
# only print figures next to a baseline run in the same session.

# Prints the best wall time in seconds of three runs of the command "$@". A failing run
# stops the benchmark, unless BENCH_ALLOW_FAILURE=1 (validate exits 1 on findings).
best_of_3() {
  local best=""
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    if ! "$@" >/dev/null 2>&1 && [ "${BENCH_ALLOW_FAILURE:-0}" != 1 ]; then
      echo "failed: $*" >&2
      exit 1
    fi
    t1=$(date +%s.%N)
    best=$(python3 -c "t=$t1-$t0; b='$best'; print(min(t, float(b)) if b else t)")
  done
  echo "$best"
}

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
