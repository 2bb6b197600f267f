#!/usr/bin/env bash
# What a process's first export costs it: bench/cpu_work (1 thread, 1,000
# requests, about 50 ms of CPU, its stacks through libc's qsort and libm)
# run FIRST_EXPORT_RUNS times in a row, in paired rounds whose order
# rotates, as
#   plain      no preload;
#   none       profiled with CONTPROF_SYMBOLIZE=none: addresses and build ids
#              only, no symbol table or debug information read;
#   local      profiled with the defaults: function names, files, lines and
#              inline chains, read at the export at exit (with libc6-dbg
#              installed, libc's and libm's compressed DWARF);
#   baseline   local with another build's preload, FIRST_EXPORT_BASELINE_LIB
#              (only when it is set): a before/after in the same rounds.
# Reported: CPU (user + system) per process, median [interquartile range]
# over rounds, and each variant's excess over `none`, which is what the
# symbolization costs.
#
#   bench/first_export.sh
# Environment: FIRST_EXPORT_ROUNDS (11), FIRST_EXPORT_RUNS (10),
# BENCH_BUILD_DIR, FIRST_EXPORT_BASELINE_LIB.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${FIRST_EXPORT_ROUNDS:-11}
RUNS=${FIRST_EXPORT_RUNS:-10}
bench_build
tmp=$(mktemp -d /tmp/contprof-first-export.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
variants=(plain none local)
if [[ -n ${FIRST_EXPORT_BASELINE_LIB:-} ]]; then
  [[ -f $FIRST_EXPORT_BASELINE_LIB ]] || bench_die "no $FIRST_EXPORT_BASELINE_LIB"
  variants+=(baseline)
fi
script="i=0; while [ \$i -lt $RUNS ]; do $BENCH_BIN/cpu_work 1 1000 >/dev/null; i=\$((i+1)); done"

run() {
  local v=$1 log=$2
  case $v in
  plain) "$BENCH_BIN/cpurun" "$log" /bin/sh -c "$script" ;;
  none)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_SYMBOLIZE=none CONTPROF_OUTPUT_DIR="$tmp/prof-none" \
      /bin/sh -c "$script" ;;
  local)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$PRELOAD_LIB" \
      CONTPROF_OUTPUT_DIR="$tmp/prof" /bin/sh -c "$script" ;;
  baseline)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$FIRST_EXPORT_BASELINE_LIB" \
      CONTPROF_OUTPUT_DIR="$tmp/prof-base" /bin/sh -c "$script" ;;
  esac
}

bench_machine
echo "first export: bench/cpu_work 1 1000, $RUNS processes a run, $ROUNDS rounds"
bench_rotate "$ROUNDS" "$tmp" "${variants[@]}"
printf '\n| variant | CPU ms per process | over none, ms |\n|---|---|---|\n'
for v in "${variants[@]}"; do
  c=$(bench_cpu_ms_per "$RUNS" "$tmp/$v")
  # Paired by round: this variant's run less none's in the same round.
  d=$(paste -d' ' "$tmp/$v" "$tmp/none" |
    awk -v n="$RUNS" '{print (($2 + $3) - ($6 + $7)) * 1000 / n}' |
    bench_quantiles | awk '{printf "%.1f [%.1f, %.1f]", $1, $2, $3}')
  printf '| %s | %s | %s |\n' "$v" "$c" "$d"
done
echo
for d in prof prof-base; do
  [[ -d $tmp/$d ]] || continue
  echo "Profiles written in $d: $(find "$tmp/$d" -name '*.pb.gz' | wc -l)"
done
