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
# BENCH_BASE_REF=COMMIT (optional): overhead.sh, alloc_overhead.sh and lock.sh
# then also run that commit's preload library as "...-base" variants in the
# same interleaved rounds, for a paired before/after comparison of a change
# (bench_build builds it in a detached worktree into $BENCH_BUILD_DIR-base).
BASE_PRELOAD_LIB=

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
    "$BENCH_BUILD_DIR/libcontprof_pprof_reader.a" \
    "$BENCH_BUILD_DIR/libcontprof.a" -lprotobuf-c -lz -lunwind -ldw -lelf -lpthread \
    -ldl -lm
  # Calls unwind.c's functions directly: linked with the static library.
  $cc -O2 -g -Wall -pthread -I"$bench_root/src" \
    -o "$BENCH_BIN/unwind_validate" "$src/unwind_validate.c" \
    "$BENCH_BUILD_DIR/libcontprof.a" -lprotobuf-c -lz -lunwind -ldw -lelf -lpthread \
    -ldl -lm
  # Links the shared library like an application would.
  $cc -O2 -g -Wall -pthread -I"$bench_root/include" \
    -o "$BENCH_BIN/sample_cost" "$src/sample_cost.c" \
    -L"$BENCH_BUILD_DIR" -lcontprof -Wl,-rpath,"$BENCH_BUILD_DIR" -lm
  $cc -O2 -g -Wall -pthread -I"$bench_root/include" \
    -o "$BENCH_BIN/label_cost" "$src/label_cost.c" \
    -L"$BENCH_BUILD_DIR" -lcontprof -Wl,-rpath,"$BENCH_BUILD_DIR"
  $cc -O2 -Wall -Wextra -pthread -o "$BENCH_BIN/switch_cost" "$src/switch_cost.c"
  $cc -O2 -Wall -Wextra -pthread -o "$BENCH_BIN/tick_cost" "$src/tick_cost.c"
  $cc -O2 -Wall -Wextra -pthread -o "$BENCH_BIN/primitive_cost" "$src/primitive_cost.c"
  $cc -O2 -Wall -Wextra -pthread -o "$BENCH_BIN/sample_clock_cost" "$src/sample_clock_cost.c"
  bench_build_base
  export BENCH_BUILT=$BENCH_BUILD_DIR
}

# Builds BENCH_BASE_REF's libraries (see above) and sets BASE_PRELOAD_LIB.
bench_build_base() {
  [[ -n ${BENCH_BASE_REF:-} ]] || return 0
  local src=$BENCH_BUILD_DIR-base-src dir=$BENCH_BUILD_DIR-base
  echo "bench: building $BENCH_BASE_REF into $dir" >&2
  git -C "$bench_root" worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
  git -C "$bench_root" worktree add -q --detach "$src" "$BENCH_BASE_REF" >&2 ||
    bench_die "cannot check out $BENCH_BASE_REF"
  BUILD_DIR=$dir "$src/scripts/build" -DCONTPROF_BUILD_TESTS=OFF >&2 ||
    bench_die "building $BENCH_BASE_REF failed"
  git -C "$bench_root" worktree remove --force "$src"
  BASE_PRELOAD_LIB=$dir/libcontprof_preload.so
}

# bench_preload VARIANT: the preload library a variant runs (its "-base"
# twin runs BENCH_BASE_REF's).
bench_preload() {
  if [[ $1 == *-base ]]; then echo "$BASE_PRELOAD_LIB"; else echo "$PRELOAD_LIB"; fi
}

# The allocation benchmarks' programs (alloc_overhead.sh,
# alloc_instructions.sh): bench/alloc_work and the forward-only interposer.
bench_alloc_build() {
  gcc -O2 -g -pthread -o "$BENCH_BIN/alloc_work" "$bench_root/bench/alloc_work.c"
  gcc -O2 -shared -fPIC -o "$BENCH_BIN/forward_only.so" \
    "$bench_root/bench/forward_only.c" -ldl
}

# bench_alloc_env VARIANT OUT_DIR ARRAY: sets the array named ARRAY to the
# environment (NAME=VALUE words) the allocation benchmarks run VARIANT
# with: forward-only, hooks-off, counting-only (every allocation counted,
# a 1 GiB mean), contprof (alloc,heap at the default mean), each "-base"
# with BENCH_BASE_REF's library; empty for any other. Profiles go to OUT_DIR.
# The sampling variants name no symbols (CONTPROF_SYMBOLIZE=none): reading
# symbol tables and debug information is paid once per process, only as far
# as the cap's allowance of the CPU spent so far permits (docs/overhead.md,
# "Short-lived processes"), so a run of 30 M pairs reads libc's debug
# information and its 1 M-pair twin does not, and the difference (30-40 ms,
# 2 to 3 points of plain) stood in alloc_overhead.sh's "CPU steady" as if
# it were paid per allocation. What naming costs is measured apart
# (docs/benchmarks.md, "Start-up and a process's first export").
bench_alloc_env() {
  local -n _env=$3
  local lib
  lib=$(bench_preload "$1")
  case $1 in
  forward-only) _env=(LD_PRELOAD="$BENCH_BIN/forward_only.so") ;;
  hooks-off*) _env=(LD_PRELOAD="$lib" CONTPROF_ENABLED=0) ;;
  counting-only*)
    _env=(LD_PRELOAD="$lib" CONTPROF_PROFILES=alloc,heap
      CONTPROF_ALLOC_SAMPLE_BYTES=1073741824 CONTPROF_SYMBOLIZE=none
      CONTPROF_OUTPUT_DIR="$2") ;;
  contprof*)
    _env=(LD_PRELOAD="$lib" CONTPROF_PROFILES=alloc,heap
      CONTPROF_SYMBOLIZE=none CONTPROF_OUTPUT_DIR="$2") ;;
  *) _env=() ;;
  esac
}

# bench_python_build PY: builds the Python package for interpreter PY with
# its in-tree backend (bindings/python/backend, build_wheel against
# $BENCH_BUILD_DIR's libcontprof.a) and unpacks the wheel into
# $BENCH_BUILD_DIR/python-X.Y.Z, which it prints (for PYTHONPATH).
bench_python_build() {
  local py=$1 ver dest
  ver=$("$py" -c 'import platform; print(platform.python_version())') ||
    bench_die "cannot run $py"
  dest=$BENCH_BUILD_DIR/python-$ver
  echo "bench: building the Python extension for $ver ($py) into $dest" >&2
  rm -rf "$dest" "$dest.wheel"
  mkdir -p "$dest.wheel"
  (cd "$bench_root/bindings/python" &&
    CONTPROF_BUILD_DIR=$BENCH_BUILD_DIR "$py" -c \
      'import sys; sys.path.insert(0, "backend"); import contprof_build; contprof_build.build_wheel(sys.argv[1])' \
      "$dest.wheel" >&2) || bench_die "building the Python extension for $ver failed"
  "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$dest.wheel"/*.whl "$dest"
  chmod 755 "$dest"/contprof/*.so
  rm -rf "$dest.wheel"
  echo "$dest"
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

# Reads numbers, one a line, on stdin; prints "median [p25, p75]" (the
# form the tables show).
bench_median_iqr() {
  bench_quantiles | awk '{printf "%.4f [%.4f, %.4f]", $1, $2, $3}'
}

# bench_rotate ROUNDS DIR VARIANT...: runs the caller's `run VARIANT LOG`
# once per variant as a warm-up, then ROUNDS rounds of every variant in an
# order that rotates from round to round, each appending to DIR/VARIANT.
bench_rotate() {
  local rounds=$1 dir=$2 v r k
  shift 2
  local vs=("$@")
  for v in "${vs[@]}"; do run "$v" "$dir/warm-up"; : >"$dir/$v"; done
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < ${#vs[@]}; k++)); do
      v=${vs[(r + k) % ${#vs[@]}]}
      run "$v" "$dir/$v"
    done
    printf '.' >&2
  done
  echo >&2
}

# bench_cpu_ms_per RUNS FILE: CPU (user + system of cpurun's lines) per run, in ms,
# as "median [p25, p75]".
bench_cpu_ms_per() {
  awk -v n="$1" '{print ($2 + $3) * 1000 / n}' "$2" | bench_quantiles |
    awk '{printf "%.2f [%.2f, %.2f]", $1, $2, $3}'
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

# Paired rounds for the overhead scripts. The caller defines
# `run VARIANT WORK FILE` (appends "wall user sys threads-cpu" to FILE) and
# $tmp. bench_rounds ROUNDS WORK VARIANT...: one warm-up run each, then per
# round every variant (in a rotating order) with WORK and with
# $BENCH_SHORT_WORK (default 0: start and exit alone) into $tmp/VARIANT and
# $tmp/VARIANT.empty.
bench_rounds() {
  local rounds=$1 work=$2 short=${BENCH_SHORT_WORK:-0} r k v
  shift 2
  local variants=("$@")
  for v in "${variants[@]}"; do run "$v" "$work" "$tmp/warm-up"; done
  for v in "${variants[@]}"; do
    : >"$tmp/$v"; : >"$tmp/$v.threads"; : >"$tmp/$v.empty"; : >"$tmp/$v.samples"
  done
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < ${#variants[@]}; k++)); do
      v=${variants[(r + k) % ${#variants[@]}]}
      run "$v" "$work" "$tmp/$v"
      run "$v" "$short" "$tmp/$v.empty"
    done
    printf '.' >&2
  done
  echo >&2
}

# bench_ratio VARIANT EXPR [BASE]: median [p25, p75] of an awk expression
# over the joined lines "variant(4 fields) base(4) variant-empty(4)
# base-empty(4)"; BASE is plain unless given.
bench_ratio() {
  local base=${3:-plain}
  paste -d' ' "$tmp/$1" "$tmp/$base" "$tmp/$1.empty" "$tmp/$base.empty" |
    awk "{ print $2 }" | bench_median_iqr
}

# bench_overhead_table THREADS-LABEL THREADS-EXPR VARIANT...: the markdown
# table of every variant against plain; THREADS-EXPR is an awk expression
# over "variant-threads-line plain-threads-line".
bench_overhead_table() {
  local label=$1 texpr=$2 v wall cpu fixed wr cr sr tr
  shift 2
  printf '\n| variant | median wall s | median CPU s | start+exit CPU s | wall / plain | CPU / plain | CPU steady / plain | %s / plain |\n' "$label"
  printf '|---|---|---|---|---|---|---|---|\n'
  for v in "$@"; do
    wall=$(awk '{print $1}' "$tmp/$v" | bench_quantiles | awk '{printf "%.3f", $1}')
    cpu=$(awk '{print $2 + $3}' "$tmp/$v" | bench_quantiles | awk '{printf "%.3f", $1}')
    fixed=$(awk '{print $2 + $3}' "$tmp/$v.empty" | bench_quantiles | awk '{printf "%.3f", $1}')
    if [[ $v == plain ]]; then
      wr="1 (baseline)" cr="1 (baseline)" sr="1 (baseline)" tr="1 (baseline)"
    else
      wr=$(bench_ratio "$v" '$1 / $5')
      cr=$(bench_ratio "$v" '($2 + $3) / ($6 + $7)')
      sr=$(bench_ratio "$v" '($2 + $3 - $10 - $11) / ($6 + $7 - $14 - $15)')
      tr=$(paste -d' ' "$tmp/$v.threads" "$tmp/plain.threads" |
        awk "{ print $texpr }" | bench_median_iqr)
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$v" "$wall" "$cpu" "$fixed" "$wr" "$cr" "$sr" "$tr"
  done
  echo
}

# bench_reported_overhead DIR [FROM_S PERIOD_S]: what contprof's profiles in
# DIR said of their own cost (docs/overhead.md), as read by go tool pprof:
# the sum of their profiler_cpu_ns over the sum of their process_cpu_ns, in
# percent ("nan" without any), over the profiles whose period began at
# FROM_S seconds or later (profile_seq x PERIOD_S; default: all of them).
bench_reported_overhead() {
  local dir=$1 from=${2:-0} period=${3:-1} f
  for f in "$dir"/*.pb.gz; do
    go tool pprof -comments "$f" 2>/dev/null | tr '\n' ' '
    echo
  done | awk -v from="$from" -v period="$period" '{
      seq = 0; p = 0; c = 0
      for (i = 1; i <= NF; i++) {
        split($i, kv, "=")
        if (kv[1] == "profile_seq") seq = kv[2]
        if (kv[1] == "profiler_cpu_ns") p = kv[2]
        if (kv[1] == "process_cpu_ns") c = kv[2]
      }
      if (seq * period >= from) { sp += p; sc += c }
    }
    END { if (sc > 0) printf "%.4f\n", 100 * sp / sc; else print "nan" }'
}
