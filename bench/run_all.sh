#!/usr/bin/env bash
# Runs every CPU-profiler benchmark and prints their tables (about 9 minutes
# on 2 cores): bench/overhead.sh, bench/accuracy.sh, bench/sample_cost.sh.
# Not part of the test suite or CI. See docs/benchmarks.md.
#
#   bench/run_all.sh [LOG]    also copies everything to LOG when given
#
# The environment variables of each script pass through (OVERHEAD_ROUNDS,
# ACCURACY_REPS, SAMPLE_RUNS, BENCH_BUILD_DIR, GPERFTOOLS_LIB, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

if (($# > 0)); then
  exec > >(tee "$1") 2>&1
fi

start=$(date +%s)
rev=$(git -C "$bench_root" rev-parse --short HEAD 2>/dev/null || echo 'no git')
if [[ -n $(git -C "$bench_root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  rev="$rev + uncommitted changes"
fi
echo "# contprof CPU benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), $rev"
bench_build
echo
echo "## Overhead at ${OVERHEAD_HZ:-100} Hz"
"$here/overhead.sh"
echo
echo "## CPU-time accuracy"
"$here/accuracy.sh"
echo
echo "## Cost of one sample"
"$here/sample_cost.sh"
echo
echo "run_all: $(($(date +%s) - start)) s"
