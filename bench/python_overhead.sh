#!/usr/bin/env bash
# Overhead of the Python profiler at its defaults (CPU profile, 100 Hz: the
# sampler thread takes the GIL 100 times a second). bench/python_work.py (a
# CPU-bound pure-Python program, ~2 s of CPU) runs plain (/usr/bin/python3
# python_work.py) and under `python3 -m contprof`, in interleaved rounds
# whose order rotates; each round also has a second plain run (an A/A
# control: the noise floor) and, for each, a run with no work (interpreter
# start-up, import and exit: paid once per process).
#
# Each run is divided by the plain run of its round. Per variant, the median
# of those ratios and their interquartile range:
#   wall        wall time, fork to exit;
#   CPU         user + system time of the whole process (the sampler and
#               uploader threads included);
#   CPU steady  the same with each run's no-work run subtracted on both
#               sides: what a long-lived service pays;
#   work thread the CPU time of the working thread as it measures it
#               (time.thread_time): the cost put on the profiled thread
#               (GIL hand-offs to the sampler, cache effects).
#
#   bench/python_overhead.sh [PYTHON]
# PYTHON: the interpreter to measure (default $BENCH_PYTHON, else
# /usr/bin/python3), e.g. /root/.pyenv/versions/3.9.18/bin/python3, for the
# per-version table of docs/benchmarks.md; the extension is built for it.
# Environment: PYOVERHEAD_ROUNDS (21), PYOVERHEAD_WORK (500 rounds of
# python_work.py: ~2 s of CPU), BENCH_BUILD_DIR, BENCH_RAW=1 to print every
# run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PYOVERHEAD_ROUNDS=${PYOVERHEAD_ROUNDS:-21}
PYOVERHEAD_WORK=${PYOVERHEAD_WORK:-500}
PY=${1:-${BENCH_PYTHON:-/usr/bin/python3}}

bench_build
pylib=$(bench_python_build "$PY")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-pyoverhead.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Not "work": bench_rounds has a local of that name, which run() would see.
workload=$bench_root/bench/python_work.py
variants=(plain contprof plain-again)

# run VARIANT WORK LOG: one run, appending "wall user sys status" to LOG.
run() {
  local v=$1 n=$2 log=$3
  rm -rf "$tmp/prof"
  case $v in
  plain*)
    "$BENCH_BIN/cpurun" "$log" env PYTHONPATH="$pylib" "$PY" "$workload" "$n" \
      >"$tmp/out" ;;
  contprof)
    "$BENCH_BIN/cpurun" "$log" env PYTHONPATH="$pylib" "$PY" -m contprof \
      --output "$tmp/prof" "$workload" "$n" >"$tmp/out" ;;
  esac
  ((n > 0)) || return 0
  awk '/^checksum/ {print $4}' "$tmp/out" >>"$log.threads"
  # A profiler that silently did nothing would look free: check its output.
  if [[ $v == contprof ]]; then
    local samples
    samples=$("$BENCH_BIN/proftotal" "$tmp"/prof/*.pb.gz | awk '{print $2}')
    [[ $samples -ge 10 ]] || bench_die "python overhead: $samples samples"
    echo "$samples" >>"$tmp/$v.samples"
  fi
}

bench_machine
echo "python overhead: python_work.py $PYOVERHEAD_WORK, defaults (cpu, 100 Hz), $PYOVERHEAD_ROUNDS rounds (+1 warm-up), $("$PY" -V)"
bench_rounds "$PYOVERHEAD_ROUNDS" "$PYOVERHEAD_WORK" "${variants[@]}"
bench_overhead_table "work thread CPU" '$1 / $2' "${variants[@]}"
echo "Ratios: median [interquartile range] over $PYOVERHEAD_ROUNDS rounds. Samples per profiled run (median): $(bench_quantiles <"$tmp/contprof.samples" | awk '{printf "%.0f", $1}')."

if [[ -n ${BENCH_RAW:-} ]]; then
  for v in "${variants[@]}"; do
    echo "raw $v (wall user sys status), then its no-work runs:"
    cat "$tmp/$v" "$tmp/$v.empty"
  done
fi
