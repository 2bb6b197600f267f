#!/usr/bin/env bash
# The cost of one unwind in a signal handler with libunwind's pipe-based
# address check against contprof's (bench/unwind_validate.c says how), on
# the slow path (unw_step from the signal's context, every read checked) and
# the fast path (unw_backtrace, warm trace cache), at stack depth 32.
#
#   bench/unwind_validate.sh
# Environment: VALIDATE_RUNS (3), VALIDATE_ROUNDS (10), VALIDATE_SIGNALS
# (2000 per phase and round), BENCH_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

VALIDATE_RUNS=${VALIDATE_RUNS:-3}
VALIDATE_ROUNDS=${VALIDATE_ROUNDS:-10}
VALIDATE_SIGNALS=${VALIDATE_SIGNALS:-2000}

bench_build
bench_machine
echo "unwind_validate $VALIDATE_ROUNDS $VALIDATE_SIGNALS, $VALIDATE_RUNS runs"
for ((r = 1; r <= VALIDATE_RUNS; r++)); do
  echo "run $r:"
  "$BENCH_BIN/unwind_validate" "$VALIDATE_ROUNDS" "$VALIDATE_SIGNALS"
done
