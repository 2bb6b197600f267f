#!/usr/bin/env bash
# Soak: a multithreaded program (tests/integration/mixed_workload.c: CPU,
# allocations with a live window, a contended mutex, short sleeps) under the
# preload with every sampler on at high rates, for SOAK_MINUTES (default 30).
# Checks, and exits 1 when one fails:
#   - RSS stays flat: VmRSS sampled every period; after SOAK_WARMUP periods,
#     the last third's mean is within SOAK_RSS_MARGIN_PCT % (default 5) plus
#     SOAK_RSS_MARGIN_KB (default 2048) of the first third's;
#   - every period produced exactly one profile: the profiles tile the run
#     (each starts where the previous ended, within 1 s, and lasts one
#     period, within 1 s; the last one, written at exit, may be shorter);
#   - nothing dropped went uncounted: over the run, the drops the profiles
#     report (samples_dropped comments) all have values on the [dropped]
#     stack, and the alloc-space total is within 3% of the bytes the program
#     says it allocated (Poisson sampling at a 4 KiB mean: millions of
#     samples, a standard error far below 1%).
# Usage: SOAK_MINUTES=5 bench/soak.sh   (docs/benchmarks.md, "Soak")
set -euo pipefail
source "$(dirname "$0")/lib.sh"

minutes=${SOAK_MINUTES:-30}
threads=${SOAK_THREADS:-4}
period=${SOAK_PERIOD:-10}
warmup=${SOAK_WARMUP:-3}
margin_pct=${SOAK_RSS_MARGIN_PCT:-5}
margin_kb=${SOAK_RSS_MARGIN_KB:-2048}
seconds=$((minutes * 60))
[ "$seconds" -ge $((period * (warmup + 3))) ] ||
  bench_die "SOAK_MINUTES too short for the warm-up and three periods"

bench_build
gcc -O1 -g -pthread -o "$BENCH_BIN/mixed_workload" \
  "$bench_root/tests/integration/mixed_workload.c"
gcc -O2 -Wall -I"$bench_root/src" -I"$BENCH_BUILD_DIR/proto" \
  -o "$BENCH_BIN/soak_check" "$bench_root/bench/soak_check.c" \
  "$BENCH_BUILD_DIR/libcontprof_pprof_reader.a" \
  "$BENCH_BUILD_DIR/libcontprof.a" -lprotobuf-c -lz -lunwind -ldw -lelf -lpthread -ldl -lm

out=$(mktemp -d "${TMPDIR:-/tmp}/contprof-soak.XXXXXX")
echo "soak: $minutes min, $threads threads, period $period s, in $out" >&2
env LD_PRELOAD="$PRELOAD_LIB" \
  CONTPROF_PROFILES=cpu,wall,alloc,heap,lock CONTPROF_CPU_HZ=1000 \
  CONTPROF_WALL_INTERVAL_MS=2 CONTPROF_ALLOC_SAMPLE_BYTES=4096 \
  CONTPROF_LOCK_SAMPLE_NS=10000 CONTPROF_UPLOAD_PERIOD="$period" \
  CONTPROF_OUTPUT_DIR="$out/profiles" \
  "$BENCH_BIN/mixed_workload" "$threads" "$seconds" 1024 \
  >"$out/workload.out" 2>"$out/workload.err" &
pid=$!
# VmRSS (KiB) every period, half a period after each export.
sleep $((period / 2))
while kill -0 "$pid" 2>/dev/null; do
  awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null >>"$out/rss" ||
    true
  sleep "$period"
done
wait "$pid" || bench_die "the workload failed: $(cat "$out/workload.err")"

fail=0
check() { # description, then a command that succeeds when it holds
  local what=$1
  shift
  if "$@"; then echo "PASS $what"; else echo "FAIL $what"; fail=1; fi
}

# RSS.
read -r n first last < <(awk -v w="$warmup" '
  NR > w { v[++n] = $1 }
  END { t = int(n / 3); for (i = 1; i <= t; i++) { a += v[i]; b += v[n - t + i] }
        printf "%d %.0f %.0f\n", n, a / t, b / t }' "$out/rss")
echo "rss: $n samples after warm-up; first third $first KiB, last third $last KiB"
check "RSS flat (last third within ${margin_pct}% + ${margin_kb} KiB)" \
  awk -v a="$first" -v b="$last" -v p="$margin_pct" -v k="$margin_kb" \
  'BEGIN { exit !(b <= a * (1 + p / 100) + k) }'

# One profile per period, tiling the run.
mapfile -t files < <(ls "$out"/profiles/*.pb.gz)
"$BENCH_BIN/soak_check" "${files[@]}" | sort -n >"$out/profiles.txt"
echo "profiles: ${#files[@]} for $seconds s at $period s"
check "profiles tile the run, one per period" awk -v p="$period" '
  { start[NR] = $1; dur[NR] = $2 }
  END {
    bad = 0
    for (i = 1; i <= NR; i++) {
      if (i < NR && (dur[i] < (p - 1) * 1e9 || dur[i] > (p + 1) * 1e9)) bad++
      if (i > 1 && (start[i] - start[i-1] - dur[i-1] > 1e9 ||
                    start[i-1] + dur[i-1] - start[i] > 1e9)) bad++
    }
    if (bad) print bad " gaps or odd durations" > "/dev/stderr"
    exit bad > 0 || NR < 2
  }' "$out/profiles.txt"

# Drops counted, values add up.
allocated=$(sed -n 's/.*allocated_bytes=\([0-9]*\).*/\1/p' "$out/workload.out")
read -r drops dropped_counts cpu_ns alloc_bytes < <(awk '
  { d += $3; c += $4; cpu += $5; a += $6 }
  END { printf "%.0f %.0f %.0f %.0f\n", d, c, cpu, a }' "$out/profiles.txt")
echo "drops: $drops reported, $dropped_counts counts on [dropped];" \
  "cpu-time $((cpu_ns / 1000000)) ms;" \
  "alloc-space $alloc_bytes B of $allocated B allocated"
check "every drop counted on [dropped]" \
  awk -v d="$drops" -v c="$dropped_counts" \
  'BEGIN { exit !((d == 0 && c == 0) || (d > 0 && c >= d)) }'
check "alloc-space within 3% of the bytes allocated" \
  awk -v a="$alloc_bytes" -v t="$allocated" \
  'BEGIN { r = a / t; print "  ratio " r; exit !(r > 0.97 && r < 1.03) }'
grep -v '^$' "$out/workload.err" | sort | uniq -c | sed 's/^/  stderr: /' || true
cat "$out/workload.out"
exit "$fail"
