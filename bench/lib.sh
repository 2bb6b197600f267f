# shellcheck shell=bash
# Shared by the bench scripts (sourced, not run). Builds contprof with
# scripts/build into $BENCH_BUILD_DIR (default: build-bench/ in this checkout,
# which .gitignore covers) with the tests off, then the bench programs into
# $BENCH_BUILD_DIR/bench with gcc. Nothing here is part of the test suite.

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_BUILD_DIR=${BENCH_BUILD_DIR:-$bench_root/build-bench}
BENCH_BIN=$BENCH_BUILD_DIR/bench
GPERFTOOLS_LIB=${GPERFTOOLS_LIB:-/usr/lib/x86_64-linux-gnu/libprofiler.so}
PRELOAD_LIB=$BENCH_BUILD_DIR/libcontprof_preload.so

bench_die() {
  echo "bench: $*" >&2
  exit 1
}

# Builds the library (incremental) and the bench programs. Once per run_all.
bench_build() {
  if [[ ${BENCH_BUILT:-} == "$BENCH_BUILD_DIR" ]]; then
    return 0
  fi
  [[ -f $GPERFTOOLS_LIB ]] ||
    bench_die "gperftools not found at $GPERFTOOLS_LIB (apt-get install libgoogle-perftools-dev, or set GPERFTOOLS_LIB)"
  echo "bench: building contprof into $BENCH_BUILD_DIR" >&2
  # The tests are off: the benchmarks need only the libraries, and a broken
  # test tree must not stop them.
  BUILD_DIR=$BENCH_BUILD_DIR "$bench_root/scripts/build" \
    -DCONTPROF_BUILD_TESTS=OFF >&2
  mkdir -p "$BENCH_BIN"
  local src=$bench_root/bench cc=${CC:-gcc}
  # The same flags as the workload target in tests/integration/tests.cmake.
  $cc -O1 -g -pthread -o "$BENCH_BIN/workload" \
    "$bench_root/tests/integration/workload.c" -ldl -lm
  $cc -O2 -g -pthread -o "$BENCH_BIN/cpu_work" "$src/cpu_work.c" -lm
  $cc -O2 -Wall -o "$BENCH_BIN/cpurun" "$src/cpurun.c"
  $cc -O2 -Wall -I"$bench_root/src" -I"$BENCH_BUILD_DIR/proto" \
    -o "$BENCH_BIN/proftotal" "$src/proftotal.c" \
    "$BENCH_BUILD_DIR/libcontprof.a" -lprotobuf-c -lz -lunwind -lpthread \
    -ldl -lm
  # Links the shared library like an application would.
  $cc -O2 -g -Wall -pthread -I"$bench_root/include" \
    -o "$BENCH_BIN/sample_cost" "$src/sample_cost.c" \
    -L"$BENCH_BUILD_DIR" -lcontprof -Wl,-rpath,"$BENCH_BUILD_DIR" -lm
  export BENCH_BUILT=$BENCH_BUILD_DIR
}

# Reads numbers, one a line, on stdin; prints "median p25 p75" (linear
# interpolation between order statistics).
bench_quantiles() {
  sort -g | awk '
    { v[NR] = $1 }
    function q(p,   h, lo) {
      h = (NR - 1) * p + 1; lo = int(h)
      return lo >= NR ? v[NR] : v[lo] + (h - lo) * (v[lo + 1] - v[lo])
    }
    END { if (NR == 0) { print "nan nan nan"; exit }
          printf "%.6f %.6f %.6f\n", q(0.5), q(0.25), q(0.75) }'
}

bench_machine() {
  local hz=unknown
  if [[ -r /boot/config-$(uname -r) ]]; then
    hz=$(sed -n 's/^CONFIG_HZ=//p' "/boot/config-$(uname -r)")
  elif [[ -r /proc/config.gz ]]; then
    hz=$(zcat /proc/config.gz | sed -n 's/^CONFIG_HZ=//p')
  fi
  echo "machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r), CONFIG_HZ=$hz, load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
