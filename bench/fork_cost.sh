#!/usr/bin/env bash
# What each child of a forking process pays for the profiler state it
# inherits: bench/fork_work holds FORK_HELD sampled blocks (allocation and
# live-heap profiles, a 64-byte sampling mean: nearly every block tracked)
# and forks FORK_CHILDREN children that allocate a little and end with the
# exit_group system call (no last profile, which _exit now writes). The
# children's CPU and page faults per child, median over FORK_ROUNDS rounds
# whose order rotates, for plain (no preload), this build, and, with
# FORK_BASELINE_LIB, another build's preload.
#
#   bench/fork_cost.sh
# Environment: FORK_ROUNDS (5), FORK_HELD (5000), FORK_CHILDREN (30),
# FORK_BASELINE_LIB, BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
FORK_ROUNDS=${FORK_ROUNDS:-5}
FORK_HELD=${FORK_HELD:-5000}
FORK_CHILDREN=${FORK_CHILDREN:-30}
bench_build
gcc -O2 -o "$BENCH_BIN/fork_work" "$bench_root/bench/fork_work.c"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-fork.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
variants=(plain contprof)
[[ -n ${FORK_BASELINE_LIB:-} ]] && variants+=(baseline)

run() {
  local lib=
  case $1 in
  contprof) lib=$PRELOAD_LIB ;;
  baseline) lib=$FORK_BASELINE_LIB ;;
  esac
  if [[ -z $lib ]]; then
    "$BENCH_BIN/fork_work" "$FORK_HELD" "$FORK_CHILDREN"
  else
    LD_PRELOAD=$lib CONTPROF_PROFILES=alloc,heap CONTPROF_ALLOC_SAMPLE_BYTES=64 \
      CONTPROF_OUTPUT_DIR="$tmp/out" CONTPROF_LOG_LEVEL=error \
      "$BENCH_BIN/fork_work" "$FORK_HELD" "$FORK_CHILDREN"
  fi
}

for ((r = 0; r < FORK_ROUNDS; r++)); do
  n=${#variants[@]}
  for ((i = 0; i < n; i++)); do
    v=${variants[$(((i + r) % n))]}
    echo "$v $(run "$v")" >>"$tmp/results"
  done
done
echo "per child of a process holding $FORK_HELD sampled blocks, median of $FORK_ROUNDS rounds:"
for v in "${variants[@]}"; do
  grep "^$v " "$tmp/results" | sed 's/[a-z_]*=//g' | awk '{print $2, $3}' | sort -n |
    awk -v v="$v" '{c[NR] = $1; f[NR] = $2} END {m = int((NR + 1) / 2);
      printf "%-9s %8.3f ms CPU, %6d page faults\n", v, c[m], f[m]}'
done
