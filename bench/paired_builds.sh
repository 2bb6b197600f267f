#!/usr/bin/env bash
# The samplers' hot paths in two builds of contprof, paired and interleaved
# in one run (for a refactor that must cost nothing, #18): the same bench
# programs against BASE's libraries and NEW's, in alternating order, each
# round:
#   cpu    bench/sample_cost 1 3 1000 linked with each libcontprof.so: the
#          median ns of the CPU handler (signal to ring) for direct signals
#          and for timer signals
#   alloc  bench/alloc_work 2 10 under each preload, CONTPROF_PROFILES=
#          alloc,heap at means of 8 KiB, 64 KiB and 512 KiB (default):
#          the workers' CPU seconds (hooks and sampling on the application's
#          threads)
#   live   bench/live_heap_work 4096 10 under each preload (4 GiB of live
#          heap held, then 2 threads x 10 M malloc/free pairs),
#          CONTPROF_PROFILES=alloc,heap at the default mean: the workers'
#          CPU seconds (the frees' filter with 8,192 tracked samples)
#   lock   bench/lock_work contended 4 2 300000 under each preload,
#          CONTPROF_PROFILES=lock, CONTPROF_LOCK_SAMPLE_NS=20000: wall seconds
# Then per figure the medians of each side and the median [p25, p75] of the
# per-round ratio NEW / BASE, with the load average seen.
#
#   bench/paired_builds.sh BASE_BUILD_DIR NEW_BUILD_DIR [ROUNDS]   (10)
#
# Build both first with scripts/build (BUILD_DIR=...); e.g. BASE from
# `git archive COMMIT | tar -x -C /tmp/base && /tmp/base/scripts/build`.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[[ $# -ge 2 ]] || bench_die "usage: bench/paired_builds.sh BASE_BUILD NEW_BUILD [ROUNDS]"
declare -A dir=([base]=$(cd "$1" && pwd) [new]=$(cd "$2" && pwd))
rounds=${3:-10}
for s in base new; do
  [[ -f ${dir[$s]}/libcontprof.so && -f ${dir[$s]}/libcontprof_preload.so ]] ||
    bench_die "${dir[$s]} has no libcontprof.so and libcontprof_preload.so"
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-paired.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$bench_root/bench cc=${CC:-gcc}
$cc -O2 -g -pthread -o "$tmp/alloc_work" "$src/alloc_work.c"
$cc -O2 -g -Wall -pthread -o "$tmp/lock_work" "$src/lock_work.c"
$cc -O2 -g -Wall -pthread -o "$tmp/live_heap_work" "$src/live_heap_work.c"
for s in base new; do
  $cc -O2 -g -Wall -pthread -I"$bench_root/include" \
    -o "$tmp/sample_cost_$s" "$src/sample_cost.c" \
    -L"${dir[$s]}" -lcontprof -Wl,-rpath,"${dir[$s]}" -lm
done

# One figure: appends "ROUND FIGURE SIDE VALUE LOAD" lines to $tmp/rows.
row() { echo "$1 $2 $3 $4 $(cut -d' ' -f1 /proc/loadavg)" >>"$tmp/rows"; }

run_side() { # ROUND SIDE
  local r=$1 s=$2 line out mean v
  line=$("$tmp/sample_cost_$s" 1 3 1000 | grep '^RESULT')
  rm -rf "$(sed 's/.*outdir=//' <<<"$line")"
  for k in direct_handler_median_ns timer_handler_median_ns; do
    row "$r" "cpu_$k" "$s" "$(sed "s/.* $k=\([0-9.]*\).*/\1/" <<<"$line")"
  done
  out=$(mktemp -d "$tmp/out.XXXX")
  for mean in 8192 65536 524288; do
    v=$(CONTPROF_OUTPUT_DIR=$out CONTPROF_MAX_OVERHEAD_PCT=0 \
      CONTPROF_PROFILES=alloc,heap CONTPROF_ALLOC_SAMPLE_BYTES=$mean \
      LD_PRELOAD=${dir[$s]}/libcontprof_preload.so \
      "$tmp/alloc_work" 2 10 2>/dev/null | sed 's/.*workers_cpu_s=//')
    row "$r" "alloc_${mean}B_workers_cpu_s" "$s" "$v"
  done
  v=$(CONTPROF_OUTPUT_DIR=$out CONTPROF_MAX_OVERHEAD_PCT=0 \
    CONTPROF_PROFILES=alloc,heap \
    LD_PRELOAD=${dir[$s]}/libcontprof_preload.so \
    "$tmp/live_heap_work" 4096 10 2>/dev/null | sed 's/.*workers_cpu_s=//')
  row "$r" "live_heap_4GiB_workers_cpu_s" "$s" "$v"
  v=$(CONTPROF_OUTPUT_DIR=$out CONTPROF_MAX_OVERHEAD_PCT=0 \
    CONTPROF_PROFILES=lock CONTPROF_LOCK_SAMPLE_NS=20000 \
    LD_PRELOAD=${dir[$s]}/libcontprof_preload.so \
    "$tmp/lock_work" contended 4 2 300000 2>/dev/null |
    sed 's/wall_s \([0-9.]*\).*/\1/')
  row "$r" "lock_contended_wall_s" "$s" "$v"
  rm -rf "$out"
}

bench_machine
echo "paired: base ${dir[base]}, new ${dir[new]}, $rounds rounds"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then run_side "$r" base; run_side "$r" new
  else run_side "$r" new; run_side "$r" base; fi
done
echo "| figure | base median | new median | new/base median [p25, p75] |"
echo "|---|---|---|---|"
for f in $(awk '{print $2}' "$tmp/rows" | awk '!seen[$0]++'); do
  b=$(awk -v f="$f" '$2 == f && $3 == "base" {print $4}' "$tmp/rows" | bench_quantiles | cut -d' ' -f1)
  n=$(awk -v f="$f" '$2 == f && $3 == "new" {print $4}' "$tmp/rows" | bench_quantiles | cut -d' ' -f1)
  q=$(awk -v f="$f" '$2 == f { v[$1 " " $3] = $4 }
      END { for (k in v) { split(k, p, " ")
              if (p[2] == "new" && v[p[1] " base"] > 0) print v[k] / v[p[1] " base"] } }' \
      "$tmp/rows" | bench_quantiles | awk '{printf "%.3f [%.3f, %.3f]", $1, $2, $3}')
  printf '| %s | %.4g | %.4g | %s |\n' "$f" "$b" "$n" "$q"
done
echo "load average during the runs: $(awk '{print $5}' "$tmp/rows" | sort -g |
  sed -n '1p;$p' | paste -sd' ' | sed 's/ / to /')"
