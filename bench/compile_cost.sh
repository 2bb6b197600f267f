#!/usr/bin/env bash
# What a short-lived process pays: `gcc -O2 -c` of a small C file (a driver,
# cc1 and as: three processes of 10-40 ms of CPU each) under the preload,
# every process profiled (cpu, the default), against plain, in interleaved
# rounds (each variant compiles COMPILE_PER_ROUND times in a row per round):
#   plain          no profiler
#   contprof       LD_PRELOAD=libcontprof_preload.so, the defaults
#   cap-off        the same with CONTPROF_MAX_OVERHEAD_PCT=0 (debug
#                  information read whatever the process's CPU)
#   symbolize-none CONTPROF_SYMBOLIZE=none (no symbol table, no debug
#                  information: the start, the sampling and the export)
#   contprof-base  BENCH_BASE_REF's library, the defaults (when set)
# Prints each variant's median wall milliseconds per compile [interquartile
# range] and its median ratio to plain over the rounds (docs/symbols.md,
# "Short-lived processes"; docs/benchmarks.md, "A compiler under the
# preload").
#
#   bench/compile_cost.sh
# Environment: COMPILE_ROUNDS (12), COMPILE_PER_ROUND (5), BENCH_BUILD_DIR,
# BENCH_BASE_REF.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COMPILE_ROUNDS=${COMPILE_ROUNDS:-12}
COMPILE_PER_ROUND=${COMPILE_PER_ROUND:-5}

bench_build
command -v gcc >/dev/null || bench_die "gcc not found"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-compile.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/f1.c" <<'EOF'
#include <stdio.h>
#include <string.h>
struct s { int a[64]; };
static int f(struct s *x, int n) {
  int t = 0;
  for (int i = 0; i < n; i++)
    t += x->a[i & 63] * i;
  return t;
}
int g(int n) { struct s x; memset(&x, 1, sizeof x); return f(&x, n); }
int main(int c, char **v) { (void)v; printf("%d\n", g(c * 100)); return 0; }
EOF
mkdir -p "$tmp/out"

variants=(plain contprof cap-off symbolize-none)
if [[ -n $BASE_PRELOAD_LIB ]]; then variants+=(contprof-base); fi

# compile VARIANT: the variant's wall milliseconds per compile.
compile() {
  local env=(A=1)
  case $1 in
  contprof) env=(LD_PRELOAD="$PRELOAD_LIB") ;;
  cap-off) env=(LD_PRELOAD="$PRELOAD_LIB" CONTPROF_MAX_OVERHEAD_PCT=0) ;;
  symbolize-none) env=(LD_PRELOAD="$PRELOAD_LIB" CONTPROF_SYMBOLIZE=none) ;;
  contprof-base) env=(LD_PRELOAD="$BASE_PRELOAD_LIB") ;;
  esac
  local start end
  start=$(date +%s%N)
  for ((i = 0; i < COMPILE_PER_ROUND; i++)); do
    env "${env[@]}" CONTPROF_OUTPUT_DIR="$tmp/out" \
      gcc -O2 -c "$tmp/f1.c" -o "$tmp/f1.o"
  done
  end=$(date +%s%N)
  awk -v ns=$((end - start)) -v n="$COMPILE_PER_ROUND" \
    'BEGIN { printf "%.3f\n", ns / n / 1e6 }'
}

bench_machine
echo "compile_cost: gcc -O2 -c, $COMPILE_ROUNDS rounds of $COMPILE_PER_ROUND compiles per variant"
for v in "${variants[@]}"; do compile "$v" >/dev/null; done # warm-up
for ((r = 0; r < COMPILE_ROUNDS; r++)); do
  for v in "${variants[@]}"; do compile "$v" >>"$tmp/$v"; done
  rm -rf "$tmp/out" && mkdir -p "$tmp/out"
  printf '.' >&2
done
echo >&2

printf '\n| variant | ms per compile | / plain |\n|---|---|---|\n'
for v in "${variants[@]}"; do
  ms=$(bench_median_iqr <"$tmp/$v")
  ratio=$(paste -d' ' "$tmp/$v" "$tmp/plain" | awk '{ print $1 / $2 }' |
    bench_median_iqr)
  printf '| %s | %s | %s |\n' "$v" "$ms" "$ratio"
done
