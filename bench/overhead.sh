#!/usr/bin/env bash
# Overhead of CPU profiling at 100 Hz. bench/cpu_work (2 threads, a fixed
# amount of work, ~30-frame stacks) runs plain, under contprof
# (LD_PRELOAD=libcontprof_preload.so CONTPROF_CPU_HZ=100; its default perf
# task clocks, and CONTPROF_CPU_CLOCK=posix as contprof-posix) and under
# gperftools (LD_PRELOAD=libprofiler.so CPUPROFILE_FREQUENCY=100), in
# interleaved rounds whose order rotates; each round also has a second plain
# run (an A/A control: the noise floor) and, for each of the three, a run with
# no work at all (start-up and exit: the cost per process, paid once).
#
# Each profiled run is divided by the plain run of its round. The table has,
# per variant, the median of those ratios and their interquartile range:
#   wall        wall time, fork to exit;
#   CPU         user + system time of the whole process (the profiler's own
#               threads included);
#   CPU steady  the same with each run's start-up/exit cost taken out (the
#               no-work run of its round subtracted from both sides): the
#               overhead while the program runs, which is what a long-lived
#               service pays;
#   workers     the CPU time of cpu_work's threads as they measure it
#               themselves: the cost the sampling puts on the profiled
#               threads (signal delivery, handler, cache effects).
# Then the steady state: over the second half of each run's requests (after
# what a profiler does once per process as it starts, such as contprof's
# first reads of symbols and debug information), the workers' CPU plus
# contprof's own threads' (contprof-*: drain, export) over the plain run's
# workers' CPU in the same half, per variant. Runs of 30000 requests are
# too short for it: use OVERHEAD_REQUESTS=300000 or more.
#
#   bench/overhead.sh
# Environment: OVERHEAD_ROUNDS (31), OVERHEAD_REQUESTS (30000: ~2.3 s of
# CPU), OVERHEAD_THREADS (2), OVERHEAD_HZ (100), BENCH_BUILD_DIR, BENCH_RAW=1
# to print every run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

OVERHEAD_ROUNDS=${OVERHEAD_ROUNDS:-31}
OVERHEAD_REQUESTS=${OVERHEAD_REQUESTS:-30000}
OVERHEAD_THREADS=${OVERHEAD_THREADS:-2}
OVERHEAD_HZ=${OVERHEAD_HZ:-100}

bench_build
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-overhead.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

variants=(plain contprof contprof-posix gperftools plain-again)
if [[ -n $BASE_PRELOAD_LIB ]]; then variants+=(contprof-base); fi

# run VARIANT REQUESTS LOG: one run, appending "wall user sys status" to LOG.
run() {
  local v=$1 n=$2 log=$3 cmd=("$BENCH_BIN/cpu_work" "$OVERHEAD_THREADS" "$2")
  rm -rf "$tmp/prof" "$tmp/g.prof"
  mkdir -p "$tmp/prof"
  case $v in
  plain*)
    "$BENCH_BIN/cpurun" "$log" "${cmd[@]}" >"$tmp/out" ;;
  contprof | contprof-posix | contprof-base)
    local clock=auto
    [[ $v == contprof-posix ]] && clock=posix
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$(bench_preload "$v")" \
      CONTPROF_CPU_HZ="$OVERHEAD_HZ" CONTPROF_OUTPUT_DIR="$tmp/prof" \
      CONTPROF_CPU_CLOCK="$clock" "${cmd[@]}" >"$tmp/out" ;;
  gperftools)
    "$BENCH_BIN/cpurun" "$log" env LD_PRELOAD="$GPERFTOOLS_LIB" \
      CPUPROFILE="$tmp/g.prof" CPUPROFILE_FREQUENCY="$OVERHEAD_HZ" \
      "${cmd[@]}" >"$tmp/out" 2>"$tmp/err" ;;
  esac
  ((n > 0)) || return 0
  # "workers_cpu_s profiler_threads_cpu_s", then the same for the second
  # half of the requests, as cpu_work printed them.
  awk '/^checksum/ {print $4, $6, $8, $10}' "$tmp/out" >>"$log.threads"
  # A profiler that silently did nothing would look free: check its output.
  local samples=0
  case $v in
  contprof*) samples=$("$BENCH_BIN/proftotal" "$tmp"/prof/*.pb.gz | awk '{print $2}') ;;
  gperftools) samples=$("$BENCH_BIN/proftotal" "$tmp/g.prof" | awk '{print $2}') ;;
  esac
  if [[ $v != plain* && $samples -lt 10 ]]; then
    bench_die "overhead: $v wrote $samples samples"
  fi
  echo "$samples" >>"$tmp/$v.samples"
}

bench_machine
echo "overhead: cpu_work $OVERHEAD_THREADS threads x $OVERHEAD_REQUESTS requests, $OVERHEAD_HZ Hz, $OVERHEAD_ROUNDS rounds (+1 warm-up)"
bench_rounds "$OVERHEAD_ROUNDS" "$OVERHEAD_REQUESTS" "${variants[@]}"
bench_overhead_table "workers CPU" '$1 / $5' "${variants[@]}"
echo "Ratios: median [interquartile range] over $OVERHEAD_ROUNDS rounds. Samples per run (median): contprof $(bench_quantiles <"$tmp/contprof.samples" | awk '{printf "%.0f", $1}'), contprof-posix $(bench_quantiles <"$tmp/contprof-posix.samples" | awk '{printf "%.0f", $1}'), gperftools $(bench_quantiles <"$tmp/gperftools.samples" | awk '{printf "%.0f", $1}')."
paste -d' ' "$tmp/contprof.threads" "$tmp/contprof" | awk '{print $2, $2 / $3}' |
  sort -g | awk '{ms[NR] = $1 * 1000; ps[NR] = $2} END {
    k = int((NR + 1) / 2)
    printf "contprof'"'"'s own threads (contprof-*), by the end of the work: median %.1f ms per run, %.2f ms per wall second.\n", ms[k], ps[k] * 1000 }'
echo "workers CPU: the CPU time cpu_work's threads measured for themselves (signal delivery and handlers on them included; start-up, exit and the profiler's threads not)."
printf 'Steady state, the second half of the requests: (workers CPU + contprof'"'"'s threads) / plain'"'"'s workers CPU, per round:'
for v in "${variants[@]}"; do
  [[ $v == plain ]] && continue
  printf ' %s %s;' "$v" "$(paste -d' ' "$tmp/$v.threads" "$tmp/plain.threads" |
    awk '{ print ($3 + $4) / $7 }' | bench_median_iqr)"
done
echo
if [[ -n $BASE_PRELOAD_LIB ]]; then
  echo "This tree against $BENCH_BASE_REF, per round: contprof / contprof-base CPU $(bench_ratio contprof '($2 + $3) / ($6 + $7)' contprof-base), CPU steady $(bench_ratio contprof '($2 + $3 - $10 - $11) / ($6 + $7 - $14 - $15)' contprof-base)."
fi
# What contprof's own threads cost when the program does nothing: a sleeping
# process under contprof, its contprof-* threads' CPU time (schedstat, ns)
# over IDLE_SECONDS.
idle_cpu() {
  local pid=$1 sum=0 t
  for t in /proc/"$pid"/task/*; do
    if [[ $(cat "$t/comm" 2>/dev/null) == contprof* ]]; then
      sum=$((sum + $(cut -d' ' -f1 "$t/schedstat")))
    fi
  done
  echo "$sum"
}
IDLE_SECONDS=${IDLE_SECONDS:-4}
env LD_PRELOAD="$PRELOAD_LIB" CONTPROF_CPU_HZ="$OVERHEAD_HZ" \
  CONTPROF_OUTPUT_DIR="$tmp/prof" sleep $((IDLE_SECONDS + 2)) &
idle_pid=$!
sleep 1
a=$(idle_cpu "$idle_pid")
sleep "$IDLE_SECONDS"
b=$(idle_cpu "$idle_pid")
wait "$idle_pid"
echo "contprof's own threads in an idle process (sleep): $(awk -v d=$((b - a)) -v s="$IDLE_SECONDS" 'BEGIN{printf "%.2f", d / s / 1e6}') ms of CPU per second."

if [[ -n ${BENCH_RAW:-} ]]; then
  for v in "${variants[@]}"; do
    echo "raw $v (wall user sys status), then its no-work runs:"
    cat "$tmp/$v" "$tmp/$v.empty"
  done
fi
