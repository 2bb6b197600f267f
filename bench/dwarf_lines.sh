#!/usr/bin/env bash
# Native lines (docs/benchmarks.md): the export cost of DWARF file/line and
# inline chains for 10,000 distinct addresses of a large generated library
# with full debug info (bench/dwarf_gen.py, NFUNCS functions with inlined
# helpers, -O2 -g), first export and later ones, against addr2line -i -f
# and eu-addr2line -i -f resolving the same addresses in the same run.
#
#   [ROUNDS=3] [BASELINE_EXPORT=...] [SKIP_EU=1] \
#   bench/dwarf_lines.sh [NFUNCS] [NADDRS]     (defaults: 6000 10000)
#
# The library is generated and built once into $BENCH_BUILD_DIR/dwarf (its
# compilation takes minutes). Prints wall time, CPU time and peak RSS of
# each, and the load average of each round.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
nfuncs=${1:-6000}
naddrs=${2:-10000}
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$bench_root/build-bench}
echo "bench: building contprof into $BENCH_BUILD_DIR" >&2
BUILD_DIR=$BENCH_BUILD_DIR "$bench_root/scripts/build" \
  -DCONTPROF_BUILD_TESTS=OFF >&2
out=$BENCH_BUILD_DIR/dwarf
mkdir -p "$out"
lib=$out/libbig-$nfuncs.so
if [[ ! -f $lib ]]; then
  echo "bench: generating and compiling $nfuncs functions (minutes)" >&2
  rm -f "$out"/big_*.c
  python3 "$bench_root/bench/dwarf_gen.py" "$nfuncs" "$out"
  gcc -O2 -g -shared -fPIC -o "$lib" "$out"/big_*.c
fi
gcc -O2 -g -Wall -I"$bench_root/src" -I"$bench_root/include" \
  -I"$BENCH_BUILD_DIR/proto" -o "$out/dwarf_export" \
  "$bench_root/bench/dwarf_export.c" \
  "$BENCH_BUILD_DIR/libcontprof_pprof_reader.a" \
  "$BENCH_BUILD_DIR/libcontprof.a" \
  -lunwind -ldw -lelf -lprotobuf-c -lz -lpthread -ldl -lm
# naddrs distinct addresses spread over the exported functions' bodies.
nm -S --defined-only "$lib" | python3 -c '
import sys
want = int(sys.argv[1])
fns = [(int(a, 16), int(s, 16)) for a, s, t, name in
       (l.split() for l in sys.stdin if len(l.split()) == 4)
       if t in "Tt" and name.startswith("big_fn_")]
per = -(-want // len(fns))
out = sorted({a + s * j // per for a, s in fns for j in range(per)})[:want]
print("\n".join("%x" % a for a in out))' "$naddrs" >"$out/addrs"
echo "library: $lib ($(stat -c %s "$lib") bytes), $(wc -l <"$out/addrs") addresses"
readelf -SW "$lib" | python3 -c '
import re, sys
for l in sys.stdin:
    m = re.search(r"(\.debug_\w+)\s+\w+\s+\w+\s+\w+\s+(\w+)", l)
    if m: print("  %s %d bytes" % (m.group(1), int(m.group(2), 16)))'
# The chains are addr2line's (function and line of every frame).
"$out/dwarf_export" "$lib" "$out/addrs" chains >"$out/chains.contprof"
addr2line -i -f -a -e "$lib" <"$out/addrs" | python3 -c '
import sys
cur = None
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("0x"):
        if cur: print(cur)
        cur = "%x" % int(line, 16); fn = None
    elif fn is None: fn = line
    else:
        cur += " %s:%s" % (fn, line.rsplit(":", 1)[1].split()[0]); fn = None
print(cur)' >"$out/chains.addr2line"
echo "chains equal to addr2line -i -f: $(paste -d'\n' "$out/chains.contprof" \
  "$out/chains.addr2line" | paste - - | awk -F'\t' '$1 == $2' | wc -l) of \
$(wc -l <"$out/addrs")"
# Wall time, CPU time (user + system) and peak RSS of a command with its
# input from a file, to the microsecond (/usr/bin/time rounds to 10 ms).
timed() {
  python3 -c '
import resource, subprocess, sys, time
t = time.perf_counter()
with open(sys.argv[1]) as f:
    subprocess.run(sys.argv[2:], stdin=f, stdout=subprocess.DEVNULL, check=True)
wall = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.3f s wall (cpu %.3f s), peak RSS %d kB" % (wall, u.ru_utime + u.ru_stime, u.ru_maxrss))' "$@"
}
# ROUNDS rounds (default 3), each running contprof's exports, DWARF off and
# addr2line back to back, so that all sides see the same load; with
# BASELINE_EXPORT=path/to/an/older/dwarf_export, that one runs in each round
# too (built the same way from another checkout).
rounds=${ROUNDS:-3}
a2l_version=$(addr2line --version | head -1 | awk '{print $NF}')
for r in $(seq 1 "$rounds"); do
  echo "=== round $r of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "--- contprof export, DWARF lines on"
  "$out/dwarf_export" "$lib" "$out/addrs" 5
  if [[ -n ${BASELINE_EXPORT:-} ]]; then
    echo "--- baseline ($BASELINE_EXPORT), DWARF lines on"
    "$BASELINE_EXPORT" "$lib" "$out/addrs" 5
  fi
  echo "--- contprof export, DWARF off (function names only)"
  "$out/dwarf_export" "$lib" "$out/addrs" 2 nodwarf
  echo "--- addr2line -i -f (binutils $a2l_version)"
  timed "$out/addrs" addr2line -i -f -e "$lib"
done
if [[ -z ${SKIP_EU:-} ]]; then
  echo "--- eu-addr2line -i -f (elfutils $(eu-addr2line --version | head -1 | awk '{print $NF}'))"
  timed "$out/addrs" eu-addr2line -i -f -e "$lib"
fi
