#!/usr/bin/env bash
# What a short-lived program pays for the profiler when LD_PRELOAD brings it
# in (a shell's children, CONTPROF_FOLLOW_EXEC): a shell that runs /bin/true
# EXEC_CHILDREN times, in paired rounds whose order rotates, as
#   plain      no preload;
#   disabled   LD_PRELOAD=libcontprof_preload.so CONTPROF_ENABLED=0: the
#              library and its dependencies are loaded, nothing starts;
#   profiled   LD_PRELOAD=... with the defaults: every child starts the
#              profiler, stops at exit and (having recorded nothing) writes
#              no profile (CPU samples from perf task clocks);
#   profiled-posix  the same with CONTPROF_CPU_CLOCK=posix;
#   profiled-nofollow  the shell profiled with CONTPROF_FOLLOW_EXEC=0: its
#              exec hooks give each child an environment without the library
#              in LD_PRELOAD (a copy in a mapping of its own), children
#              unprofiled;
#   baseline, baseline-nofollow  profiled and profiled-nofollow with another
#              build's preload, EXEC_BASELINE_LIB (only when it is set): a
#              before/after in the same interleaved rounds.
# Reported: wall and CPU (user + system, the children's included) per child,
# median [interquartile range] over rounds, and the profiles written (0).
#
#   bench/exec_cost.sh
# Environment: EXEC_ROUNDS (11), EXEC_CHILDREN (200), BENCH_BUILD_DIR,
# EXEC_BASELINE_LIB.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

EXEC_ROUNDS=${EXEC_ROUNDS:-11}
EXEC_CHILDREN=${EXEC_CHILDREN:-200}
bench_build
tmp=$(mktemp -d /tmp/contprof-exec-cost.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
variants=(plain disabled profiled profiled-posix profiled-nofollow)
if [[ -n ${EXEC_BASELINE_LIB:-} ]]; then
  [[ -f $EXEC_BASELINE_LIB ]] || bench_die "no $EXEC_BASELINE_LIB"
  variants+=(baseline baseline-nofollow)
fi
script="i=0; while [ \$i -lt $EXEC_CHILDREN ]; do /bin/true; i=\$((i+1)); done"

run() {
  local v=$1 log=$2
  case $v in
  plain) "$BENCH_BIN/cpurun" "$log" /bin/sh -c "$script" ;;
  disabled)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_ENABLED=0 /bin/sh -c "$script" ;;
  profiled)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_OUTPUT_DIR="$tmp/prof" /bin/sh -c "$script" ;;
  profiled-posix)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_OUTPUT_DIR="$tmp/prof" CONTPROF_CPU_CLOCK=posix \
      /bin/sh -c "$script" ;;
  profiled-nofollow)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_OUTPUT_DIR="$tmp/prof-shell" CONTPROF_FOLLOW_EXEC=0 \
      /bin/sh -c "$script" ;;
  baseline)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$EXEC_BASELINE_LIB" \
      CONTPROF_OUTPUT_DIR="$tmp/prof" /bin/sh -c "$script" ;;
  baseline-nofollow)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$EXEC_BASELINE_LIB" \
      CONTPROF_OUTPUT_DIR="$tmp/prof-shell" CONTPROF_FOLLOW_EXEC=0 \
      /bin/sh -c "$script" ;;
  esac
}

bench_machine
echo "exec cost: /bin/sh running /bin/true $EXEC_CHILDREN times, $EXEC_ROUNDS rounds"
bench_rotate "$EXEC_ROUNDS" "$tmp" "${variants[@]}"
printf '\n| variant | wall ms per child | CPU ms per child |\n|---|---|---|\n'
for v in "${variants[@]}"; do
  w=$(awk -v n="$EXEC_CHILDREN" '{print $1 * 1000 / n}' "$tmp/$v" | bench_quantiles |
    awk '{printf "%.2f [%.2f, %.2f]", $1, $2, $3}')
  c=$(bench_cpu_ms_per "$EXEC_CHILDREN" "$tmp/$v")
  printf '| %s | %s | %s |\n' "$v" "$w" "$c"
done
echo
echo "Profiles written by the profiled runs: $(find "$tmp/prof" -name '*.pb.gz' 2>/dev/null | wc -l)"
