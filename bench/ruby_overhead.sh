#!/usr/bin/env bash
# Overhead of the Ruby binding at its defaults (the cpu profile, 100 Hz per
# thread of CPU time) on a CPU-bound Ruby program (bench/ruby_work.rb),
# against the same program without the profiler, in paired rounds:
#   plain        ruby bench/ruby_work.rb
#   contprof     ruby -rcontprof/auto bench/ruby_work.rb (profiles written
#                to a temporary directory; each run is checked for samples)
#   plain-again  a second plain run: the A/A control (the noise floor)
# The order within a round rotates. The program measures its own work (wall
# and process CPU time, start-up excluded); each run is divided by the plain
# run of its round and the table gives the median ratio and its IQR. The
# process's whole wall time (start-up, the last profile's write) is also
# given, as "process wall".
#
# Then the same comparison inside one process (bench/ruby_inproc.rb):
# back-to-back blocks of ruby_work, profiled (Contprof.start/stop around the
# block) and not, in rotating order, so that the two sides of a pair see the
# same machine a fraction of a second apart: on a shared, busy machine this
# resolves much smaller effects than separate processes do.
#
#   bench/ruby_overhead.sh
# Environment: RUBY_OVERHEAD_ROUNDS (21), RUBY_OVERHEAD_WORK (80 rounds of
# ruby_work.rb, ~0.35 s of CPU here), RUBY_INPROC_PAIRS (60),
# RUBY_INPROC_WORK (40 rounds a block), CONTPROF_BUILD_DIR (a CMake build
# with libcontprof.a; else bindings/ruby/build.sh builds the core),
# BENCH_RAW=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ROUNDS=${RUBY_OVERHEAD_ROUNDS:-21}
WORK=${RUBY_OVERHEAD_WORK:-80}
PAIRS=${RUBY_INPROC_PAIRS:-60}
BLOCK=${RUBY_INPROC_WORK:-40}
ruby=${RUBY:-/usr/bin/ruby}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/contprof-ruby-overhead.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

out=${CONTPROF_RUBY_OUT:-$tmp/ext}
CONTPROF_RUBY_OUT=$out "$bench_root/bindings/ruby/build.sh" >&2
load=(-I "$bench_root/bindings/ruby/lib" -I "$out/lib")
work=$bench_root/bench/ruby_work.rb

# run VARIANT: appends "work_wall work_cpu process_wall" to $tmp/VARIANT.
run() {
  local v=$1 t0 t1 res
  rm -rf "$tmp/prof"
  t0=$(date +%s%N)
  case $v in
  plain*) res=$("$ruby" "$work" "$WORK") ;;
  contprof)
    res=$(CONTPROF_OUTPUT_DIR="$tmp/prof" "$ruby" "${load[@]}" \
      -rcontprof/auto "$work" "$WORK") ;;
  esac
  t1=$(date +%s%N)
  if [[ $v == contprof ]]; then
    local n
    n=$("$ruby" -I "$bench_root/bindings/ruby/test" -rpprof_reader -e \
      'puts Dir[ARGV[0] + "/*.pb.gz"].sum { |f| PprofReader.read(f).total("cpu-samples/count") }' \
      "$tmp/prof")
    ((n >= 10)) || bench_die "ruby_overhead: contprof wrote $n samples"
  fi
  echo "$res $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')" >>"$tmp/$v"
}

variants=(plain contprof plain-again)
bench_machine
echo "ruby_overhead: $("$ruby" -v | cut -d' ' -f1-2), ruby_work.rb $WORK, $ROUNDS rounds (+1 warm-up)"
for v in "${variants[@]}"; do run "$v"; : >"$tmp/$v"; done
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < ${#variants[@]}; k++)); do
    run "${variants[$(((k + r) % ${#variants[@]}))]}"
  done
done
[[ -n ${BENCH_RAW:-} ]] && paste "$tmp/plain" "$tmp/contprof" "$tmp/plain-again" >&2

printf '%-12s %-24s %-24s %-24s\n' variant "work wall (IQR)" "work CPU (IQR)" "process wall (IQR)"
for v in contprof plain-again; do
  line=$v
  for col in 1 2 3; do
    q=$(paste "$tmp/$v" "$tmp/plain" | awk -v c="$col" '{ print $c / $(c + 3) }' | bench_quantiles)
    read -r med p25 p75 <<<"$q"
    line+=$(printf ' %+6.2f%% (%+.2f..%+.2f)' "$(awk -v m="$med" 'BEGIN{print (m-1)*100}')" \
      "$(awk -v m="$p25" 'BEGIN{print (m-1)*100}')" "$(awk -v m="$p75" 'BEGIN{print (m-1)*100}')")
  done
  echo "$line"
done
printf 'plain medians: work wall %.3f s, work CPU %.3f s, process wall %.3f s\n' \
  "$(cut -d' ' -f1 "$tmp/plain" | bench_quantiles | cut -d' ' -f1)" \
  "$(cut -d' ' -f2 "$tmp/plain" | bench_quantiles | cut -d' ' -f1)" \
  "$(cut -d' ' -f3 "$tmp/plain" | bench_quantiles | cut -d' ' -f1)"

echo "in-process blocks: $PAIRS pairs of ruby_work $BLOCK"
"$ruby" "${load[@]}" "$bench_root/bench/ruby_inproc.rb" "$PAIRS" "$BLOCK" \
  "$tmp/inproc" >"$tmp/inproc.txt"
n=$("$ruby" -I "$bench_root/bindings/ruby/test" -rpprof_reader -e \
  'puts Dir[ARGV[0] + "/*.pb.gz"].sum { |f| PprofReader.read(f).total("cpu-samples/count") }' \
  "$tmp/inproc")
((n >= PAIRS)) || bench_die "ruby_overhead: in-process profiles have $n samples"
[[ -n ${BENCH_RAW:-} ]] && cat "$tmp/inproc.txt" >&2
for c in 2 3; do
  read -r med p25 p75 < <(awk -v c="$c" '{ print $c / $1 }' "$tmp/inproc.txt" | bench_quantiles)
  printf '%-12s block CPU %+6.2f%% (%+.2f..%+.2f)\n' "$([[ $c == 2 ]] && echo contprof || echo plain-again)" \
    "$(awk -v m="$med" 'BEGIN{print (m-1)*100}')" "$(awk -v m="$p25" 'BEGIN{print (m-1)*100}')" \
    "$(awk -v m="$p75" 'BEGIN{print (m-1)*100}')"
done
printf 'plain block CPU median %.3f s, %s CPU samples in the profiled blocks\n' \
  "$(cut -d' ' -f1 "$tmp/inproc.txt" | bench_quantiles | cut -d' ' -f1)" "$n"
