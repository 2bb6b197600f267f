#!/usr/bin/env bash
# contprof merge against go tool pprof -proto on the same 200 profiles
# (bench/gen_profiles.c), in one run: wall time and peak RSS of each, from
# /usr/bin/time. Then contprof flame on the merged profile. Uses the build
# in $BUILD_DIR (default build/, made by scripts/build).
# usage: bench/merge.sh [N_PROFILES]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
n=${1:-200}
work=$(mktemp -d /tmp/cp_bench_merge.XXXXXX)
trap 'rm -rf "$work"' EXIT
[[ -x $build/contprof && -f $build/libcontprof.a ]] ||
  { echo "bench: run scripts/build first" >&2; exit 1; }
gcc -O2 -Wall -I"$root/src" -I"$build/proto" -o "$work/gen" \
  "$root/bench/gen_profiles.c" "$build/libcontprof.a" -lprotobuf-c -lz -ldw -lelf \
  -lunwind -lpthread -ldl -lm
mkdir "$work/in"
"$work/gen" "$work/in" "$n"
echo "inputs: $n files, $(du -sk "$work/in" | cut -f1) kB"
# Wall time and CPU time (user + system, all threads), best of 3; the CPU
# time tells more on a loaded machine. Peak RSS of the last run.
measure() { # label, command...
  local label=$1 best=999999 bestcpu=999999 rss=0
  shift
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %U %S %M" -o "$work/t" "$@" >/dev/null \
      2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    read -r sec user sys kib <"$work/t"
    ms=$(awk -v s="$sec" 'BEGIN{printf "%d", s*1000}')
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%d", (u+s)*1000}')
    ((ms < best)) && best=$ms
    ((cpu < bestcpu)) && bestcpu=$cpu
    rss=$kib
  done
  printf '%-26s wall %6d ms  cpu %6d ms  peak RSS %4d MiB\n' "$label" \
    "$best" "$bestcpu" $((rss / 1024))
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
measure "contprof merge" "$build/contprof" merge -o "$work/merged.pb.gz" \
  "$work/in"
if command -v go >/dev/null; then
  export HOME=$work PPROF_TMPDIR=$work
  measure "go tool pprof -proto" sh -c \
    "go tool pprof -proto '$work'/in/*.pb.gz > '$work/go.pb.gz'"
fi
measure "contprof flame (merged)" "$build/contprof" flame -o \
  "$work/flame.html" "$work/merged.pb.gz"
echo "merged: $(stat -c %s "$work/merged.pb.gz") bytes; flame page:" \
  "$(stat -c %s "$work/flame.html") bytes"
# The page's own timing (parse the JSON, lay out, first draw), from its
# #selftest report in headless Chromium.
if command -v chromium >/dev/null; then
  for _ in 1 2 3; do
    chromium --headless --no-sandbox --disable-gpu \
      --user-data-dir="$work/chromium" --window-size=1200,800 \
      --virtual-time-budget=20000 --dump-dom \
      "file://$work/flame.html#selftest=all,handler_1" 2>/dev/null |
      grep -o '"nodes":[0-9]*,"renderMs":[0-9]*'
  done
fi
"$build/contprof" top -n 3 "$work/merged.pb.gz"
if command -v go >/dev/null; then
  go tool pprof -top -nodecount=3 "$work/go.pb.gz" 2>/dev/null | tail -4
fi
