#!/usr/bin/env bash
# Cost of the lock sampler (bench/lock_work.c), in paired, interleaved runs
# whose order rotates each round:
#
# 1. Uncontended pair: ns per pthread_mutex_lock/unlock pair on a free mutex
#    (one busy thread plus an idle one) for
#      plain      no preload: libc's functions directly;
#      hooks-off  LD_PRELOAD=libcontprof_preload.so CONTPROF_ENABLED=0: the
#                 hooks interpose, the profiler is not running;
#      lock-on    LD_PRELOAD=... CONTPROF_PROFILES=lock: the lock sampler
#                 running (its threads too).
#    Reported: the median of each variant, and the median [interquartile
#    range] of the per-round difference with plain.
# 2. Contended: LOCK_THREADS threads on LOCK_MUTEXES mutexes, short critical
#    sections; wall time of plain, lock-on (default CONTPROF_LOCK_SAMPLE_NS
#    unless LOCK_SAMPLE_NS is set) and plain-again (an A/A control: the noise
#    floor). Reported: median [IQR] of wall / plain per round, and the lock
#    samples the profile holds (a profiler that recorded nothing would look
#    free).
#
#   bench/lock.sh
# Environment: LOCK_ROUNDS (21), LOCK_PAIRS (20000000), LOCK_THREADS (4),
# LOCK_MUTEXES (4), LOCK_ITERATIONS (2000000), LOCK_SAMPLE_NS (unset: the
# default), BENCH_BUILD_DIR, BENCH_RAW=1 to print every run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

LOCK_ROUNDS=${LOCK_ROUNDS:-21}
LOCK_PAIRS=${LOCK_PAIRS:-20000000}
LOCK_THREADS=${LOCK_THREADS:-4}
LOCK_MUTEXES=${LOCK_MUTEXES:-4}
LOCK_ITERATIONS=${LOCK_ITERATIONS:-2000000}

bench_build
${CC:-gcc} -O2 -g -Wall -pthread -o "$BENCH_BIN/lock_work" \
  "$bench_root/bench/lock_work.c"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-lock.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

sample_env=()
if [[ -n ${LOCK_SAMPLE_NS:-} ]]; then
  sample_env=(CONTPROF_LOCK_SAMPLE_NS="$LOCK_SAMPLE_NS")
fi

# run VARIANT ARGS...: runs lock_work ARGS under VARIANT, prints its output.
run() {
  local v=$1
  shift
  rm -rf "$tmp/prof"
  mkdir -p "$tmp/prof"
  case $v in
  plain*) "$BENCH_BIN/lock_work" "$@" ;;
  hooks-off*)
    env LD_PRELOAD="$(bench_preload "$v")" CONTPROF_ENABLED=0 \
      "$BENCH_BIN/lock_work" "$@" ;;
  lock-on*)
    env LD_PRELOAD="$(bench_preload "$v")" CONTPROF_PROFILES=lock \
      CONTPROF_OUTPUT_DIR="$tmp/prof" CONTPROF_LOG_LEVEL=error \
      "${sample_env[@]}" "$BENCH_BIN/lock_work" "$@" ;;
  esac
}

# lock_samples: the lock-acquire total of the last lock-on run's profile.
lock_samples() {
  "$BENCH_BUILD_DIR/contprof" top "$tmp"/prof/*.pb.gz --type lock-acquire \
    -n 1 2>/dev/null | sed -n 's/.*total \([0-9]*\).*/\1/p'
}

# stats FILE: "median [p25, p75]" of the numbers in FILE.
stats() {
  bench_quantiles <"$1" | awk '{printf "%.3f [%.3f, %.3f]", $1, $2, $3}'
}

bench_machine
echo "lock: $LOCK_ROUNDS rounds (+1 warm-up); pair: $LOCK_PAIRS pairs; contended: $LOCK_THREADS threads, $LOCK_MUTEXES mutexes, $LOCK_ITERATIONS iterations each; CONTPROF_LOCK_SAMPLE_NS=${LOCK_SAMPLE_NS:-default}"

pair_variants=(plain hooks-off lock-on)
cont_variants=(plain lock-on plain-again)
if [[ -n $BASE_PRELOAD_LIB ]]; then
  pair_variants+=(hooks-off-base lock-on-base)
  cont_variants+=(lock-on-base)
fi
for v in "${pair_variants[@]}"; do : >"$tmp/pair.$v"; done
for v in "${cont_variants[@]}"; do : >"$tmp/cont.$v"; done
: >"$tmp/samples"
for ((r = -1; r < LOCK_ROUNDS; r++)); do
  for ((k = 0; k < ${#pair_variants[@]}; k++)); do
    v=${pair_variants[(r + 1 + k) % ${#pair_variants[@]}]}
    ns=$(run "$v" pair "$LOCK_PAIRS" | awk '/^ns_per_pair/ {print $2}')
    ((r >= 0)) && echo "$ns" >>"$tmp/pair.$v"
  done
  for ((k = 0; k < ${#cont_variants[@]}; k++)); do
    v=${cont_variants[(r + 1 + k) % ${#cont_variants[@]}]}
    out=$(run "$v" contended "$LOCK_THREADS" "$LOCK_MUTEXES" "$LOCK_ITERATIONS")
    if ((r >= 0)); then
      echo "$out" | awk '/^wall_s/ {print $2}' >>"$tmp/cont.$v"
      if [[ $v == lock-on* ]]; then
        n=$(lock_samples)
        [[ -n $n && $n -gt 0 ]] || bench_die "lock: the lock-on run recorded no lock samples"
        if [[ $v == lock-on ]]; then echo "$n" >>"$tmp/samples"; fi
      fi
    fi
  done
  printf '.' >&2
done
echo >&2

echo
echo "Uncontended lock/unlock pair (ns per pair):"
echo
echo "| variant | median ns/pair [IQR] | minus plain, per round: median [IQR] |"
echo "|---|---|---|"
for v in "${pair_variants[@]}"; do
  if [[ $v == plain ]]; then
    d="0 (baseline)"
  else
    paste -d' ' "$tmp/pair.$v" "$tmp/pair.plain" | awk '{print $1 - $2}' >"$tmp/diff"
    d=$(stats "$tmp/diff")
  fi
  echo "| $v | $(stats "$tmp/pair.$v") | $d |"
done

echo
echo "Contended ($LOCK_THREADS threads, $LOCK_MUTEXES mutexes), wall time:"
echo
echo "| variant | median wall s [IQR] | wall / plain, per round: median [IQR] |"
echo "|---|---|---|"
for v in "${cont_variants[@]}"; do
  if [[ $v == plain ]]; then
    d="1 (baseline)"
  else
    paste -d' ' "$tmp/cont.$v" "$tmp/cont.plain" | awk '{print $1 / $2}' >"$tmp/ratio"
    d=$(bench_median_iqr <"$tmp/ratio")
  fi
  echo "| $v | $(stats "$tmp/cont.$v") | $d |"
done
echo
echo "Contended acquisitions the lock-on profile estimates (lock-acquire total, median per run): $(bench_quantiles <"$tmp/samples" | awk '{printf "%.0f", $1}')"
if [[ -n $BASE_PRELOAD_LIB ]]; then
  paste -d' ' "$tmp/cont.lock-on" "$tmp/cont.lock-on-base" | awk '{print $1 / $2}' >"$tmp/ratio"
  paste -d' ' "$tmp/pair.lock-on" "$tmp/pair.lock-on-base" | awk '{print $1 - $2}' >"$tmp/diff"
  echo "This tree against $BENCH_BASE_REF, per round: contended wall lock-on / lock-on-base $(bench_median_iqr <"$tmp/ratio"); uncontended pair lock-on minus lock-on-base $(stats "$tmp/diff") ns."
fi
if [[ -n ${BENCH_RAW:-} ]]; then
  for f in "$tmp"/pair.* "$tmp"/cont.*; do
    echo "raw $(basename "$f"): $(tr '\n' ' ' <"$f")"
  done
fi
