#!/usr/bin/env bash
# What the profiler's threads cost an idle process: a profiled `sleep`
# (IDLE_PROFILES, file output) and the CPU time each contprof-*
# thread used over IDLE_SECONDS, from /proc/PID/task/TID/schedstat, after
# 1.5 s of start-up. Each library given (default: this tree's build) is
# measured IDLE_ROUNDS times in turn.
#
#   bench/idle_cost.sh [LIB...]
# Environment: IDLE_SECONDS (10), IDLE_ROUNDS (3), IDLE_PROFILES (cpu, the
# default of CONTPROF_PROFILES), BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
IDLE_SECONDS=${IDLE_SECONDS:-10}
IDLE_ROUNDS=${IDLE_ROUNDS:-3}
IDLE_PROFILES=${IDLE_PROFILES:-cpu}
libs=("$@")
if [[ ${#libs[@]} -eq 0 ]]; then
  bench_build
  libs=("$PRELOAD_LIB")
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-idle.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# thread_ns PID: "name ns" for each of PID's contprof-* threads.
thread_ns() {
  local t
  for t in /proc/"$1"/task/*; do
    local name
    name=$(cat "$t/comm" 2>/dev/null) || continue
    [[ $name == contprof-* ]] && echo "$name $(cut -d' ' -f1 "$t/schedstat")"
  done
}

echo "CPU of each profiler thread of an idle sleep profiled for $IDLE_PROFILES, over ${IDLE_SECONDS} s, in ms"
for ((r = 1; r <= IDLE_ROUNDS; r++)); do
  for lib in "${libs[@]}"; do
    LD_PRELOAD=$lib CONTPROF_PROFILES=$IDLE_PROFILES \
      CONTPROF_OUTPUT_DIR="$tmp" sleep $((IDLE_SECONDS + 3)) &
    pid=$!
    sleep 1.5
    thread_ns "$pid" >"$tmp/a"
    sleep "$IDLE_SECONDS"
    thread_ns "$pid" >"$tmp/b"
    wait "$pid"
    echo "$lib round $r: $(join "$tmp/a" "$tmp/b" |
      awk '{printf "%s %.2f  ", $1, ($3 - $2) / 1e6}')"
  done
done
