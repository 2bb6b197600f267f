#!/usr/bin/env bash
# Two servers of one kind loaded at the same time, one plain and one
# profiled (every profile type, as bench/real/real.sh), so that what the
# machine does meanwhile (a slower vCPU for seconds, another tenant) falls
# on both alike. real.sh runs the variants one after the other, and on a
# shared 2-vCPU VM its A/A control moved by 10 to 20 points between runs:
# more than the targets it is meant to show (docs/benchmarks.md, "Real
# servers").
#
#   nginx     (the default) each server its own directory, port and 1
#             worker (nginx -p DIR), started once as nobody and loaded by
#             its own wrk (-t1, SBS_CONNS connections, a 4 KiB static
#             file) for SBS_SECONDS; the server's CPU over the whole load.
#   postgres  each server its own copy of one cluster (initdb, pgbench -i
#             -s 5; synchronous_commit off, so that the server's CPU, not
#             the disk, is measured), started as postgres and loaded by its
#             own pgbench (TPC-B like, SBS_CLIENTS clients, 1 thread) for
#             SBS_SECONDS + 2 s; what is measured is the window from 1 s
#             after the clients connected to 1 s before they end, so that
#             neither the backends' start nor their exit (where a profiled
#             one writes its profile) counts: the transactions that ended
#             in it (pgbench's per-transaction log), their p99, and the
#             server's CPU over it.
#
# Both loads start together, SBS_REPEATS times. Per repeat: each server's
# requests (transactions), p99 and CPU per request (its processes' CPU from
# /proc over the window, divided by the requests served), and the ratio of
# the second server to the first. The first phase runs plain against plain
# (the method's own noise), the second plain against profiled. Each server
# is pinned to one CPU (every thread of its processes, and the processes it
# forks later), the two swapped each repeat, and the ratios are taken per
# pair of repeats (the geometric mean of the two), so that a vCPU slower
# than the other falls on both.
#
# Under this load both servers and both load generators share the 2 CPUs:
# the CPU per request is the figure to read (what each request cost its
# server, both under the same conditions). The throughput ratio says how
# the CPUs were shared: the profiled server's own threads compete for them
# too.
#
#   bench/real/side_by_side.sh [nginx|postgres]
# Environment: SBS_REPEATS (10), SBS_SECONDS (10), SBS_WARMUP (3),
# SBS_CONNS (16, nginx), SBS_CLIENTS (4, postgres), SBS_PROFILES
# (cpu,wall,alloc,heap,lock), SBS_ENV (more VAR=VALUE words for the
# profiled server), SBS_BASE_ENV (set: the first server of the second
# phase is profiled too, with these words instead of SBS_ENV's: two
# settings side by side, such as SBS_BASE_ENV=CONTPROF_DIRECT_CALLS=0),
# BENCH_BUILD_DIR, SBS_DETAIL (nginx: a file to append, per repeat and
# server, each thread of the worker: "name:run_ms/wait_ms/voluntary
# switches a second/involuntary a second/perf descriptors").
# Needs nginx-light and wrk, or postgresql (scripts/deps bench); run as
# root.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nginx.sh"
source "$(dirname "$0")/postgres.sh"

SBS_REPEATS=${SBS_REPEATS:-10}
SBS_SECONDS=${SBS_SECONDS:-10}
SBS_WARMUP=${SBS_WARMUP:-3}
SBS_CONNS=${SBS_CONNS:-16}
SBS_CLIENTS=${SBS_CLIENTS:-4}
server=${1:-nginx}
PORTS=(18091 18092)

[[ $(id -u) -eq 0 ]] || bench_die "run as root (the servers run as nobody or postgres)"
case $server in
nginx)
  command -v nginx >/dev/null || bench_die "nginx missing (scripts/deps bench)"
  command -v wrk >/dev/null || bench_die "wrk missing (scripts/deps bench)"
  user=nobody
  ;;
postgres)
  [[ -x $PG_BIN/postgres ]] || bench_die "postgresql missing (scripts/deps bench)"
  user=postgres
  ;;
*) bench_die "unknown server $server (nginx, postgres)" ;;
esac

bench_build
tmp=$(mktemp -d /tmp/contprof-sbs.XXXXXX)
chmod 755 "$tmp"
cp "$PRELOAD_LIB" "$tmp/libcontprof_preload.so"
chmod 755 "$tmp/libcontprof_preload.so"
masters=()

# Stops every server started: nginx's QUIT and PostgreSQL's INT (a fast
# shutdown) let each process exit normally and write its profile.
stop_all() {
  local m sig=QUIT
  [[ $server == postgres ]] && sig=INT
  for m in ${masters[@]+"${masters[@]}"}; do
    kill -"$sig" "$m" 2>/dev/null || true
  done
  for m in ${masters[@]+"${masters[@]}"}; do
    for _ in $(seq 1 300); do
      kill -0 "$m" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$m" 2>/dev/null || true
  done
  masters=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT

# pg_cluster: one cluster, initialised for pgbench, in $tmp/cluster; each
# server gets a copy (pg_dir).
pg_cluster() {
  local d=$tmp/cluster
  pg_initdb "$d"
  start cluster "${PORTS[0]}" plain
  "$PG_BIN/pgbench" -h 127.0.0.1 -p "${PORTS[0]}" -U postgres -i -s 5 postgres \
    >"$d/init.log" 2>&1 || bench_die "pgbench -i failed: $(tail -3 "$d/init.log")"
  stop_all
}

# start NAME PORT VARIANT: a server in $tmp/NAME on PORT, plain or
# profiled; appends its master's pid to masters (setpriv and env exec it).
start() {
  local d=$tmp/$1 env=() cmd
  if [[ $server == nginx ]]; then
    nginx_dir "$d" "$2" 1
    cmd=(nginx -c "$d/nginx.conf" -p "$d")
  else
    if [[ $1 != cluster && ! -d $d/data ]]; then
      mkdir -p "$d/sock"
      cp -a "$tmp/cluster/data" "$d/data"
      chown -R postgres "$d"
    fi
    read -ra cmd <<<"$(pg_command "$d" "$2")"
  fi
  mkdir -p "$d/profiles"
  chmod 700 "$d/profiles"
  chown "$user" "$d/profiles"
  if [[ $3 == profiled || $3 == base ]]; then
    env=("LD_PRELOAD=$tmp/libcontprof_preload.so"
      "CONTPROF_PROFILES=${SBS_PROFILES:-cpu,wall,alloc,heap,lock}"
      CONTPROF_EXPORT=file "CONTPROF_OUTPUT_DIR=$d/profiles"
      "CONTPROF_SERVICE=$server-$1")
    if [[ $3 == base ]]; then
      read -ra extra <<<"${SBS_BASE_ENV:-}"
    else
      read -ra extra <<<"${SBS_ENV:-}"
    fi
    env+=(${extra[@]+"${extra[@]}"})
  fi
  setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    env ${env[@]+"${env[@]}"} "${cmd[@]}" 2>>"$d/stderr" &
  masters+=($!)
  if [[ $server == nginx ]]; then
    wait_port "$2"
  else
    pg_wait "$2" "$d/stderr"
  fi
}

# tree_cpu MASTER: CPU seconds of the master and its children so far.
tree_cpu() {
  local stats=("/proc/$1/stat")
  for p in $(pgrep -P "$1"); do stats+=("/proc/$p/stat"); done
  cat "${stats[@]}" 2>/dev/null | awk -v hz="$(getconf CLK_TCK)" '
    { sub(/^.*\) /, ""); s += $12 + $13 } END { printf "%.3f\n", s / hz }'
}

# threads MASTER: a line per thread of the master's children (nginx's
# worker, PostgreSQL's backends): "pid/tid name run_ns wait_ns voluntary
# involuntary perf_fds", from the kernel's schedstat and status (run: on a
# CPU; wait: runnable, not running), perf_fds the process's perf event
# descriptors (a thread on a perf task clock holds one).
threads() {
  local p t perf
  for p in $(pgrep -P "$1"); do
    perf=$(find /proc/"$p"/fd -lname 'anon_inode:*perf_event*' 2>/dev/null | wc -l)
    for t in /proc/"$p"/task/*; do
      printf '%s/%s %s %s %s %s %s\n' "$p" "${t##*/}" "$(tr ' ' _ <"$t/comm")" \
        "$(cut -d' ' -f1,2 "$t/schedstat")" \
        "$(awk '/^voluntary_ctxt/ {v = $2} /^nonvoluntary_ctxt/ {n = $2} END {print v, n}' "$t/status")" \
        "$perf"
    done 2>/dev/null
  done
}

# thread_deltas BEFORE AFTER SECONDS: per thread of AFTER, what it used
# since BEFORE: "name run_ms wait_ms voluntary/s involuntary/s perf_fds".
thread_deltas() {
  awk -v s="$3" 'NR == FNR {r[$1] = $3; w[$1] = $4; v[$1] = $5; n[$1] = $6; next}
    {printf " %s:%.0f/%.0f/%.0f/%.0f/%d", $2, ($3 - r[$1]) / 1e6, ($4 - w[$1]) / 1e6,
       ($5 - v[$1]) / s, ($6 - n[$1]) / s, $7}' "$1" "$2"
}

# pin MASTER CPU: the master, its children and all their threads on CPU
# (what the master forks later inherits it). A child that ended between
# the listing and its taskset (a PostgreSQL worker) is no failure.
pin() {
  local p
  for p in "$1" $(pgrep -P "$1"); do
    taskset -a -p -c "$2" "$p" >/dev/null 2>&1 || [[ ! -e /proc/$p ]] ||
      taskset -a -p -c "$2" "$p" >/dev/null
  done
}

# wrk_figures FILE: "requests p99_ms"
wrk_figures() {
  awk '/requests in/ {n = $1}
       $1 == "99%" {v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
                    p = (u == "us" ? v / 1000 : u == "s" ? v * 1000 : v)}
       END {print n, p}' "$1"
}

# pgbench_load PORT SECONDS [LOGDIR]: pgbench on the server at PORT (with
# LOGDIR, its per-transaction log there).
pgbench_load() {
  local pgb=("$PG_BIN/pgbench" -h 127.0.0.1 -p "$1" -U postgres
    -c "$SBS_CLIENTS" -j 1 -n -T "$2" postgres)
  if [[ -z ${3:-} ]]; then
    "${pgb[@]}" >/dev/null 2>&1
    return
  fi
  rm -rf "$3" && mkdir -p "$3"
  (cd "$3" && "${pgb[@]}" -l --log-prefix=tx >"$3/out" 2>&1)
}

# load PORT SECONDS [OUT]: the server's load generator on the server at
# PORT: wrk (with OUT, its report with latencies there) or pgbench_load
# (with OUT, its per-transaction log there).
load() {
  if [[ $server == postgres ]]; then
    pgbench_load "$@"
  elif [[ -z ${3:-} ]]; then
    wrk -t1 -c"$SBS_CONNS" -d"${2}s" "http://127.0.0.1:$1/index.html" >/dev/null
  else
    wrk -t1 -c"$SBS_CONNS" -d"${2}s" --latency "http://127.0.0.1:$1/index.html" >"$3"
  fi
}

# pg_figures LOGDIR T0 T1: "transactions p99_ms" of the transactions that
# ended in [T0, T1) (epoch seconds). The log's lines: "client tx
# latency_us script epoch_s epoch_us".
pg_figures() {
  cat "$1"/tx* | awk -v a="$2" -v b="$3" \
    '{t = $5 + $6 / 1e6; if (t >= a && t < b) print $3}' | sort -n |
    awk '{v[NR] = $1} END {i = int(NR * 0.99); if (i < 1) i = 1;
                           printf "%d %.3f\n", NR, NR ? v[i] / 1000 : 0}'
}

# load_repeat MA MB: one load of both servers at once; sets fa, fb
# ("requests p99_ms") and ca0 ca1 cb0 cb1 (their CPU seconds at the
# window's ends). Which load starts in the background swaps with the
# repeat ($r).
load_repeat() {
  local pa pb other
  if ((r % 2)); then pa=${PORTS[0]} pb=${PORTS[1]}; else pa=${PORTS[1]} pb=${PORTS[0]}; fi
  if [[ $server == nginx ]]; then
    [[ -z ${SBS_DETAIL:-} ]] || { threads "$1" >"$tmp/ta0"; threads "$2" >"$tmp/tb0"; }
    ca0=$(tree_cpu "$1")
    cb0=$(tree_cpu "$2")
    load "$pa" "$SBS_SECONDS" "$tmp/wrk.$pa" &
    other=$!
    load "$pb" "$SBS_SECONDS" "$tmp/wrk.$pb"
    wait "$other"
    ca1=$(tree_cpu "$1")
    cb1=$(tree_cpu "$2")
    if [[ -n ${SBS_DETAIL:-} ]]; then
      threads "$1" >"$tmp/ta1"
      threads "$2" >"$tmp/tb1"
      {
        printf '%s first' "$r"
        thread_deltas "$tmp/ta0" "$tmp/ta1" "$SBS_SECONDS"
        printf '\n%s second' "$r"
        thread_deltas "$tmp/tb0" "$tmp/tb1" "$SBS_SECONDS"
        echo
      } >>"$SBS_DETAIL"
    fi
    fa=$(wrk_figures "$tmp/wrk.${PORTS[0]}")
    fb=$(wrk_figures "$tmp/wrk.${PORTS[1]}")
    return
  fi
  load "$pa" $((SBS_SECONDS + 2)) "$tmp/tx.$pa" &
  other=$!
  load "$pb" $((SBS_SECONDS + 2)) "$tmp/tx.$pb" &
  local mine=$! t0 t1
  sleep 1
  ca0=$(tree_cpu "$1")
  cb0=$(tree_cpu "$2")
  t0=$(date +%s.%N)
  sleep "$SBS_SECONDS"
  ca1=$(tree_cpu "$1")
  cb1=$(tree_cpu "$2")
  t1=$(date +%s.%N)
  wait "$other" "$mine"
  fa=$(pg_figures "$tmp/tx.${PORTS[0]}" "$t0" "$t1")
  fb=$(pg_figures "$tmp/tx.${PORTS[1]}" "$t0" "$t1")
}

# phase NAME VARIANT_A VARIANT_B: both servers started, SBS_REPEATS loads
# at once; prints a line per repeat: "NAME r reqA p99A cpuA reqB p99B cpuB"
# (cpu in us per request).
phase() {
  start a "${PORTS[0]}" "$2"
  start b "${PORTS[1]}" "$3"
  local ma=${masters[0]} mb=${masters[1]}
  [[ -z ${SBS_DETAIL:-} ]] || echo "phase $1: $2 $3" >>"$SBS_DETAIL"
  local r fa fb ca0 ca1 cb0 cb1 other
  for ((r = 1; r <= SBS_REPEATS; r++)); do
    if [[ $r == 1 ]]; then
      load "${PORTS[0]}" "$SBS_WARMUP" &
      other=$!
      load "${PORTS[1]}" "$SBS_WARMUP"
      wait "$other"
    fi
    # Each server on a CPU of its own (every thread of its processes), the
    # CPUs swapped each repeat: one vCPU of this VM may run slower than the
    # other for minutes, which charged one server alone in unpinned runs
    # (an A/A phase read 0.90-0.94 for the second server in 6 repeats of
    # 20). The load generators go where the scheduler puts them.
    pin "$ma" $(((r - 1) % 2))
    pin "$mb" $((r % 2))
    load_repeat "$ma" "$mb"
    echo "$1 $r $fa $ca0 $ca1 $fb $cb0 $cb1" | awk '{
      printf "%s %s %d %.3f %.2f %d %.3f %.2f load=", $1, $2, $3, $4,
        $3 ? ($6 - $5) * 1e6 / $3 : 0, $7, $8, $7 ? ($10 - $9) * 1e6 / $7 : 0 }'
    cut -d' ' -f1 /proc/loadavg
  done
  stop_all
  sleep 2
}

[[ $server == postgres ]] && pg_cluster
bench_machine
if [[ $server == nginx ]]; then
  echo "side by side: 2 nginx (1 worker each), each loaded by wrk -t1 -c$SBS_CONNS at the same time;" \
    "$SBS_REPEATS repeats of ${SBS_SECONDS} s after ${SBS_WARMUP} s of warm-up"
else
  echo "side by side: 2 PostgreSQL (copies of one cluster, scale 5), each loaded by pgbench -c$SBS_CLIENTS -j1 at the same time;" \
    "$SBS_REPEATS repeats of a ${SBS_SECONDS} s window after ${SBS_WARMUP} s of warm-up"
fi
echo "per repeat: phase, repeat, then for the first and the second server: requests, p99 ms, server CPU us per request"
phase aa plain plain >"$tmp/aa"
cat "$tmp/aa"
phase ab "$([[ -n ${SBS_BASE_ENV:-} ]] && echo base || echo plain)" profiled >"$tmp/ab"
cat "$tmp/ab"
python3 - "$tmp/aa" "$tmp/ab" <<'PY'
import statistics, sys
def q(r):
    r = sorted(r)
    if len(r) < 4:
        return "%.3f" % statistics.median(r)
    a = statistics.quantiles(r, n=4)
    return "%.3f [%.3f, %.3f]" % (statistics.median(r), a[0], a[2])
print()
print("| phase (per pair of repeats) | second / first: requests | p99 | CPU per request |")
print("|---|---|---|---|")
# Per pair of repeats (each server once on each CPU): the geometric mean
# of the pair's two ratios.
def pairs(r):
    return [(r[i] * r[i + 1]) ** 0.5 for i in range(0, len(r) - 1, 2)]
for name, path in (("plain / plain (A/A)", sys.argv[1]), ("profiled / plain", sys.argv[2])):
    rows = [l.split() for l in open(path) if l.strip()]
    req = pairs([int(w[5]) / int(w[2]) for w in rows])
    p99 = pairs([float(w[6]) / float(w[3]) if float(w[3]) > 0 else 1.0 for w in rows])
    cpu = pairs([float(w[7]) / float(w[4]) for w in rows])
    print("| %s | %s | %s | %s |" % (name, q(req), q(p99), q(cpu)))
PY
d=$tmp/b/profiles
files=("$d"/*.pb.gz)
if [[ -f ${files[0]} ]]; then
  echo
  # Every profile carries the header; cpu-time where it was profiled, else
  # the files' own default type.
  own() { "$BENCH_BUILD_DIR/contprof" top "${files[@]}" "$@" -n 1 2>&1 | grep '^Profiler overhead' || true; }
  account=$(own --type cpu-time)
  [[ -n $account ]] || account=$(own)
  echo "the profiled server's own account: $account"
fi
