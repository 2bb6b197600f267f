#!/usr/bin/env bash
# What the socket calls' hooks (src/interpose/socket_calls.c) add to each
# call: bench/socket_calls (N recv calls with MSG_DONTWAIT on an empty
# socket, then N send+recv pairs; then N reads of an empty non-blocking
# socket and N write+read pairs) plain, plain with one idle thread of its
# own (what any thread beside the application's costs each call on a
# descriptor), the same with a thread that took a descriptor table of its
# own (what is left of that cost: the C library's), with this tree's preload library (CONTPROF_PROFILES=cpu, the
# default), the same with CONTPROF_DIRECT_CALLS=0 (every call through the C
# library's function: docs/overhead.md, "One thread's system calls") and,
# with BENCH_BASE_REF, with that commit's library,
# interleaved for ROUNDS rounds whose order rotates; prints each variant's
# median ns per call and per pair.
#
#   bench/socket_call_cost.sh
# Environment: ROUNDS (9), CALLS (2000000), BENCH_BASE_REF, BENCH_BUILD_DIR.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-9}
CALLS=${CALLS:-2000000}
bench_build
work=$(mktemp -d /tmp/cp_bench_sock.XXXXXX)
trap 'rm -rf "$work"' EXIT
${CC:-gcc} -O2 -Wall -Wextra -pthread -o "$work/socket_calls" "$bench_root/bench/socket_calls.c"
variants=(plain plain-thread plain-thread-own-table contprof contprof-libc)
[[ -n $BASE_PRELOAD_LIB ]] && variants+=(base)
run() {
  case $1 in
  plain) "$work/socket_calls" "$CALLS" ;;
  plain-thread) "$work/socket_calls" "$CALLS" thread ;;
  plain-thread-own-table) "$work/socket_calls" "$CALLS" thread-own-table ;;
  contprof) CONTPROF_OUTPUT_DIR=$work LD_PRELOAD=$PRELOAD_LIB "$work/socket_calls" "$CALLS" ;;
  contprof-libc) CONTPROF_DIRECT_CALLS=0 CONTPROF_OUTPUT_DIR=$work LD_PRELOAD=$PRELOAD_LIB "$work/socket_calls" "$CALLS" ;;
  base) CONTPROF_OUTPUT_DIR=$work LD_PRELOAD=$BASE_PRELOAD_LIB "$work/socket_calls" "$CALLS" ;;
  esac
}
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  for ((i = 0; i < ${#variants[@]}; i++)); do
    v=${variants[$(((i + r) % ${#variants[@]}))]}
    run "$v" >>"$work/$v.txt"
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for v in "${variants[@]}"; do
  recv=$(sed 's/.*recv_ns=\([0-9.]*\).*/\1/' "$work/$v.txt" | median)
  pair=$(sed 's/.* pair_ns=\([0-9.]*\).*/\1/' "$work/$v.txt" | median)
  rd=$(sed 's/.*read_ns=\([0-9.]*\).*/\1/' "$work/$v.txt" | median)
  rw=$(sed 's/.*rw_pair_ns=\([0-9.]*\).*/\1/' "$work/$v.txt" | median)
  echo "$v: recv ${recv} ns a call, send+recv ${pair} ns a pair, read ${rd} ns a call, write+read ${rw} ns a pair (median of $ROUNDS)"
done
