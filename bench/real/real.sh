#!/usr/bin/env bash
# Real servers with and without contprof (every profile type: cpu, wall,
# alloc, heap, lock; file output), docs/benchmarks.md "Real servers":
#   nginx    loaded by wrk (one thread, REAL_CONNS connections, a 4 KiB
#            static file), nginx with 2 workers;
#   postgres loaded by pgbench (TPC-B like, scale 5, REAL_CLIENTS clients,
#            2 threads; synchronous_commit off, so that the server's CPU,
#            not the disk, is measured).
# Each server is started on 127.0.0.1 on a non-default port from its own
# configuration and data under a temporary directory, as an unprivileged
# user (nobody for nginx, postgres for PostgreSQL, which refuses root), and
# stopped after each run (and on exit, by a trap). Plain and profiled runs
# alternate (ABBA...), REAL_REPEATS of each, REAL_SECONDS of load after
# REAL_WARMUP seconds of warm-up. Prints throughput, p99 latency and the
# server's CPU per request per run (for postgres also while every backend
# runs, one second before the end: without the backends' exit, when each
# profiled one writes its profile),
# the profiled/plain ratios (each repeat against the plain run of its
# round: median [interquartile range] from 4 repeats), and the top functions
# of the last profiled run's profiles (`contprof top`, all processes).
#
#   bench/real/real.sh [nginx] [postgres]        (default: both)
# Environment: REAL_REPEATS (3), REAL_SECONDS (15), REAL_WARMUP (3),
# REAL_CONNS (32), REAL_CLIENTS (8), REAL_PAUSE (2 s between runs),
# REAL_PGBENCH_ARGS (more words for pgbench, e.g. -C: a new connection, so a
# new backend process, per transaction, as a server without a pooler has),
# REAL_PROFILES (cpu,wall,alloc,heap,lock: CONTPROF_PROFILES when profiled),
# REAL_ENV (more VAR=VALUE words for the profiled server, e.g.
# CONTPROF_CPU_CLOCK=posix), REAL_ENV_B (when set, a second profiled
# variant, "profiled-b", with these words instead of REAL_ENV, in the same
# rounds: two settings compared against one plain baseline), REAL_PERF (1:
# `perf record -a` over the middle of each run's load, then per variant the
# median share of the machine's samples in contprof's threads, in its code
# on the server's threads, and in copy-on-write faults taken by its code;
# and the server's samples per request against plain's, split into the
# server's own code, the kernel on its threads, contprof's code there and
# contprof's threads: what the profiler's own figures count (its code and
# threads) and what they cannot (the rest running slower or more);
# REAL_PERF_ARGS: perf record's sampling words, `-g -F 999` by default,
# e.g. `--call-graph dwarf,8192 -F 499` for callers in code built without
# frame pointers),
# REAL_CPU_TRACE (1: for postgres, the server's CPU about every second of
# the load, to check the CPU columns), REAL_KEEP (a directory: the last
# profiled run's profiles of each server and variant are copied there, for
# `go tool pprof -comments`, PostgreSQL's log (with `CONTPROF_LOG_LEVEL=debug`
# in REAL_ENV, the profiler's debug lines), and with REAL_PERF each run's
# perf.data), BENCH_BUILD_DIR.
# Needs the Debian packages of scripts/deps's `bench` group (nginx-light, wrk,
# postgresql, run as root to switch users).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/nginx.sh"
source "$(dirname "$0")/postgres.sh"

REAL_REPEATS=${REAL_REPEATS:-3}
REAL_SECONDS=${REAL_SECONDS:-15}
REAL_WARMUP=${REAL_WARMUP:-3}
REAL_CONNS=${REAL_CONNS:-32}
REAL_PGBENCH_ARGS=${REAL_PGBENCH_ARGS:-}
REAL_CLIENTS=${REAL_CLIENTS:-8}
NGINX_PORT=18080
PG_PORT=15432
servers=("$@")
[[ ${#servers[@]} -eq 0 ]] && servers=(nginx postgres)

[[ $(id -u) -eq 0 ]] || bench_die "run as root (the servers run as nobody and postgres)"
command -v nginx >/dev/null || bench_die "nginx missing (scripts/deps bench)"
command -v wrk >/dev/null || bench_die "wrk missing (scripts/deps bench)"
[[ -x $PG_BIN/postgres ]] || bench_die "postgresql missing (scripts/deps bench)"

bench_build
tmp=$(mktemp -d /tmp/contprof-real.XXXXXX)
chmod 755 "$tmp"
# The preload library where the servers' users can read it.
cp "$PRELOAD_LIB" "$tmp/libcontprof_preload.so"
chmod 755 "$tmp/libcontprof_preload.so"
server_pid=""

stop_server() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    # nginx: QUIT is a graceful stop; postgres: INT a fast shutdown. Both
    # let every process exit normally (and write its profile).
    kill "-$1" "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
  # Every process of the server gone (a profiled worker writes its profile
  # on its way out), then a pause: the next run must not share the CPUs
  # with the last one's exit.
  for _ in $(seq 1 300); do
    pgrep -u nobody -x nginx >/dev/null || pgrep -u postgres -x postgres >/dev/null || break
    sleep 0.1
  done
  sleep "${REAL_PAUSE:-2}"
}
cleanup() {
  stop_server TERM
  rm -rf "$tmp"
}
trap cleanup EXIT

# run_as USER ENV... -- COMMAND...: as USER, in the background, with ENV
# added after the switch (setpriv itself, not profiled: with contprof's
# threads running, glibc aborts in setresgid: see docs/benchmarks.md);
# sets server_pid (the server itself: setpriv and env exec it).
run_as() {
  local user=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    env ${env[@]+"${env[@]}"} "$@" &
  server_pid=$!
}

# profiled_env DIR SERVICE VARIANT: the environment of a profiled server
# writing into DIR.
profiled_env() {
  local extra=${REAL_ENV:-}
  [[ $3 == profiled-b ]] && extra=${REAL_ENV_B:-}
  echo "LD_PRELOAD=$tmp/libcontprof_preload.so CONTPROF_PROFILES=${REAL_PROFILES:-cpu,wall,alloc,heap,lock} CONTPROF_EXPORT=file CONTPROF_OUTPUT_DIR=$1 CONTPROF_SERVICE=$2 $extra"
}

# results: one line per run, "server variant repeat throughput p99_ms
# server_cpu_us_per_request the_same_while_running load=...".
results=$tmp/results
: >"$results"

# --- nginx + wrk ----------------------------------------------------------
nginx_setup() { nginx_dir "$tmp/nginx" "$NGINX_PORT" 2; }

# server_cpu USER COMM: CPU seconds used so far by the server (its live
# processes, and the children its master reaped), from /proc: one cat and
# one awk over every process, so that the reading takes milliseconds. (It
# took one sed and one awk per process, 1.5-2 s under load for PostgreSQL's
# 14: a reading meant for one second before the end of the load then saw
# backends exit before it was done, their CPU neither in their own entry
# nor yet in the master's.)
server_cpu() {
  local stats=()
  for p in $(pgrep -u "$1" -x "$2"); do stats+=("/proc/$p/stat"); done
  # Fields after the ")": state is 1, utime 12, stime 13, cutime 14,
  # cstime 15; only the master's cutime/cstime (its reaped children). A
  # process may end between pgrep and the read: it counts as nothing (its
  # time goes to the master's cutime). The command names have no ") ".
  { [[ ${#stats[@]} -eq 0 ]] || cat "${stats[@]}" 2>/dev/null || true; } |
    awk -v master="$server_pid" -v hz="$(getconf CLK_TCK)" '
      { pid = $1; sub(/^.*\) /, ""); t = $12 + $13
        if (pid == master) t += $14 + $15
        s += t }
      END { printf "%.2f\n", s / hz }'
}

# cpu_trace USER COMM FILE: with REAL_CPU_TRACE=1, server_cpu and the
# number of the server's processes each 0.5 s until the load ends (pgbench
# gone), into FILE: to check the CPU columns against the load's course.
cpu_trace() {
  : >"$3"
  while pgrep -x pgbench >/dev/null; do
    echo "$(date +%s.%N) $(server_cpu "$1" "$2") $(pgrep -c -u "$1" -x "$2")" >>"$3"
    sleep 0.5
  done
}

# perf_during SERVER VARIANT REPEAT: with REAL_PERF=1, records every CPU
# (cpu-clock, call graphs) from one second into the load to one second
# before its end, in the background (perf_pid).
perf_pid=""
perf_during() {
  [[ ${REAL_PERF:-0} == 1 ]] || return 0
  (sleep 1 && exec perf record -q -a ${REAL_PERF_ARGS:--g -F 999} -o "$tmp/perf.$1.$2.$3.data" \
    -- sleep $((REAL_SECONDS > 3 ? REAL_SECONDS - 2 : 1)) >/dev/null 2>&1) &
  perf_pid=$!
}
perf_wait() {
  [[ -n $perf_pid ]] && wait "$perf_pid" 2>/dev/null || true
  perf_pid=""
}

# nginx_run VARIANT REPEAT
nginx_run() {
  local variant=$1 r=$2 env=() out=$tmp/nginx/$1-$2
  if [[ $variant == profiled* ]]; then
    rm -rf "$out"
    mkdir -m 700 "$out" && chown nobody "$out"
    read -ra env <<<"$(profiled_env "$out" nginx "$variant")"
  fi
  run_as nobody ${env[@]+"${env[@]}"} -- nginx -c "$tmp/nginx/nginx.conf" -p "$tmp/nginx" \
    2>>"$tmp/nginx/stderr"
  wait_port "$NGINX_PORT"
  wrk -t1 -c"$REAL_CONNS" -d"${REAL_WARMUP}s" "http://127.0.0.1:$NGINX_PORT/index.html" >/dev/null
  local load cpu0 cpu1
  load=$(cut -d' ' -f1 /proc/loadavg)
  cpu0=$(server_cpu nobody nginx)
  perf_during nginx "$variant" "$r"
  wrk -t1 -c"$REAL_CONNS" -d"${REAL_SECONDS}s" --latency \
    "http://127.0.0.1:$NGINX_PORT/index.html" >"$tmp/wrk.out"
  cpu1=$(server_cpu nobody nginx)
  perf_wait
  stop_server QUIT
  local rps p99 n
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out")
  n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
  # wrk prints the 99% latency with its unit (us, ms, s).
  p99=$(awk '$1 == "99%" {v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
          print (u == "us" ? v / 1000 : u == "s" ? v * 1000 : v)}' "$tmp/wrk.out")
  local per
  per=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN {printf "%.2f", (b - a) * 1e6 / n}')
  # The workers live on: the whole run is steady.
  echo "nginx $variant $r $rps $p99 $per $per load=$load" |
    tee -a "$results"
}

# --- postgres + pgbench ---------------------------------------------------
pg_setup() {
  local d=$tmp/pg
  pg_initdb "$d"
  pg_start plain ""
  "$PG_BIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -i -s 5 postgres \
    >"$d/init.log" 2>&1 || bench_die "pgbench -i failed: $(tail -3 "$d/init.log")"
  stop_server INT
}

pg_start() {
  local env=()
  [[ $1 == profiled* ]] && read -ra env <<<"$(profiled_env "$2" postgres "$1")"
  local cmd
  read -ra cmd <<<"$(pg_command "$tmp/pg" "$PG_PORT")"
  run_as postgres ${env[@]+"${env[@]}"} -- "${cmd[@]}" 2>>"$tmp/pg/server.log"
  pg_wait "$PG_PORT" "$tmp/pg/server.log"
}

# pg_run VARIANT REPEAT
pg_run() {
  local variant=$1 r=$2 out=$tmp/pg/$1-$2
  if [[ $variant == profiled* ]]; then
    rm -rf "$out"
    mkdir -m 700 "$out" && chown postgres "$out"
  fi
  pg_start "$variant" "$out"
  local pgb=("$PG_BIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres
    -c "$REAL_CLIENTS" -j 2 $REAL_PGBENCH_ARGS postgres) # split on purpose
  "${pgb[@]}" -T "$REAL_WARMUP" >/dev/null 2>&1
  local load cpu0 cpu1
  load=$(cut -d' ' -f1 /proc/loadavg)
  rm -rf "$tmp/pglog" && mkdir "$tmp/pglog"
  local t0 tmid cpumid
  cpu0=$(server_cpu postgres postgres)
  t0=$(date +%s.%N)
  (cd "$tmp/pglog" && "${pgb[@]}" -n -T "$REAL_SECONDS" -l --log-prefix=tx \
    >"$tmp/pgbench.out" 2>&1) &
  local pgb_pid=$!
  local trace_pid=""
  if [[ ${REAL_CPU_TRACE:-0} == 1 ]]; then
    cpu_trace postgres postgres "$tmp/cputrace" &
    trace_pid=$!
  fi
  perf_during postgres "$variant" "$r"
  # The CPU while every backend runs, one second before the end: what a
  # long-lived server pays, without the backends' exit (each profiled one
  # writes its profile then, symbolizing it: a cost per connection).
  sleep $((REAL_SECONDS > 2 ? REAL_SECONDS - 1 : 1))
  cpumid=$(server_cpu postgres postgres)
  tmid=$(date +%s.%N)
  wait "$pgb_pid"
  perf_wait
  sleep 0.5 # the backends' exit, reaped by the postmaster
  cpu1=$(server_cpu postgres postgres)
  if [[ -n $trace_pid ]]; then
    wait "$trace_pid"
    echo "postgres $variant $r: CPU trace (time since the load began, server CPU s, its processes; cpu0 $cpu0, mid $cpumid, end $cpu1)"
    awk -v t0="$t0" '{printf "  %6.2f s %8.2f %s\n", $1 - t0, $2, $3}' "$tmp/cputrace"
  fi
  stop_server INT
  local tps p99 n nmid
  tps=$(awk '/^tps = / {print $3; exit}' "$tmp/pgbench.out")
  n=$(awk '/number of transactions actually processed/ {print $NF}' "$tmp/pgbench.out" | cut -d/ -f1)
  # Per-transaction log: "client tx latency_us script epoch_s epoch_us".
  p99=$(cat "$tmp/pglog"/tx* | awk '{print $3}' | sort -n |
    awk '{v[NR] = $1} END {i = int(NR * 0.99); if (i < 1) i = 1; print v[i] / 1000}')
  nmid=$(cat "$tmp/pglog"/tx* | awk -v a="$t0" -v b="$tmid" \
    '{t = $5 + $6 / 1e6; if (t >= a && t < b) n++} END {print n + 0}')
  echo "postgres $variant $r $tps $p99 $(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN {printf "%.2f", (b - a) * 1e6 / n}')" \
    "$(awk -v a="$cpu0" -v b="$cpumid" -v n="$nmid" 'BEGIN {printf "%.2f", n ? (b - a) * 1e6 / n : 0}') load=$load" |
    tee -a "$results"
}

bench_machine
echo "load: nginx ${REAL_CONNS} connections (wrk -t1), postgres ${REAL_CLIENTS} clients (pgbench -j 2${REAL_PGBENCH_ARGS:+ $REAL_PGBENCH_ARGS});" \
  "${REAL_SECONDS} s per run after ${REAL_WARMUP} s of warm-up, $REAL_REPEATS repeats per side"
variants=(plain profiled)
[[ -n ${REAL_ENV_B:-} ]] && variants+=(profiled-b)
for s in "${servers[@]}"; do
  case $s in
  nginx) nginx_setup ;;
  postgres) pg_setup ;;
  *) bench_die "unknown server $s (nginx, postgres)" ;;
  esac
  for ((r = 1; r <= REAL_REPEATS; r++)); do
    # Each variant goes first in turn, and every other round in reverse, so
    # that no variant always runs after the same one (with three, a plain
    # rotation did: the second profiled variant then always followed the
    # first, which a run's effect on the next would have charged to it).
    # Two variants: AB BA BA AB; three: every order in 6 rounds.
    k=$(((r - 1) / 2 % ${#variants[@]}))
    order=("${variants[@]:k}" "${variants[@]:0:k}")
    if ((r % 2 == 0)); then
      for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
        t=${order[i]} order[i]=${order[j]} order[j]=$t
      done
    fi
    for v in "${order[@]}"; do
      if [[ $s == nginx ]]; then nginx_run "$v" "$r"; else pg_run "$v" "$r"; fi
    done
  done
done

echo
echo "| server | plain: throughput/s, p99 ms, server CPU us per request (per repeat) | profiled | throughput ratio | p99 ratio | CPU per request ratio | the same while running |"
echo "|---|---|---|---|---|---|---|"
python3 - "$results" "${REAL_ENV:-}" "${REAL_ENV_B:-}" "${servers[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
envs = {"profiled": sys.argv[2], "profiled-b": sys.argv[3]}
for s in sys.argv[4:]:
    runs = {}
    for r in rows:
        if r[0] == s:
            runs.setdefault(r[2], {})[r[1]] = (float(r[3]), float(r[4]), float(r[5]), float(r[6]))
    for v in ("profiled", "profiled-b"):
        reps = [runs[k] for k in sorted(runs) if "plain" in runs[k] and v in runs[k]]
        if not reps:
            continue
        fmt = lambda v: "; ".join("%.0f, %.2f, %.1f" % x[:3] for x in v)
        # Each repeat's ratio to the plain run of its round: the median, and
        # the interquartile range, which shows how far the rounds moved.
        def ratio(i):
            r = sorted(p[v][i] / p["plain"][i] for p in reps)
            if len(r) < 4:
                return "%.3f" % statistics.median(r)
            q = statistics.quantiles(r, n=4)
            return "%.3f [%.3f, %.3f]" % (statistics.median(r), q[0], q[2])
        name = s + (" (%s)" % envs[v] if envs[v] else "")
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            name, fmt([p["plain"] for p in reps]), fmt([p[v] for p in reps]),
            ratio(0), ratio(1), ratio(2), ratio(3)))
PY

if [[ ${REAL_PERF:-0} == 1 ]]; then
  echo
  echo "perf record -a over each run's load: share of the machine's samples (median over repeats)"
  echo "| server | variant | contprof's threads | contprof's code on the server's threads | copy-on-write faults in contprof's code |"
  echo "|---|---|---|---|---|"
  for s in "${servers[@]}"; do
    for v in "${variants[@]}"; do
      for f in "$tmp/perf.$s.$v".*.data; do
        [[ -f $f ]] || continue
        # One record per sample: its thread's name, then its frames, leaf
        # first. The first frame outside the kernel says whose code it is.
        # A sample whose chain is empty has no frame there: its own address
        # (the same samples in the same order, one line each) says instead.
        perf script -i "$f" -F comm,ip,dso --hide-call-graph 2>/dev/null >"$tmp/own-addresses"
        perf script -i "$f" -F comm,ip,sym,dso 2>/dev/null | awk -v own="$tmp/own-addresses" '
          BEGIN { RS = "" }
          { n++; split($0, l, "\n"); user = ""
            if ((getline mine < own) <= 0) mine = ""
            for (i = 2; i <= length(l); i++) if (l[i] !~ /kernel/) { user = l[i]; break }
            if (length(l) < 2 && mine !~ /kernel/) user = mine
            if (l[1] ~ /^ *contprof-/) threads++
            else if (user ~ /libcontprof/) code++
            if (user ~ /libcontprof/ && $0 ~ /do_wp_page|wp_page_copy/) cow++ }
          END { printf "%.3f %.3f %.3f\n", 100 * threads / n, 100 * code / n, 100 * cow / n }'
      done | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
if rows:
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    print("| %s | %s | %.2f%% | %.2f%% | %.2f%% |" % (sys.argv[1], sys.argv[2], *med))
' "$s" "$v"
    done
  done
  # The same samples per request: each run's samples (the perf window is
  # the same length in every run) over its throughput, by part, by each
  # sample's own address (a kernel sample is the kernel's here, where the
  # table above gives it to the code that called into the kernel).
  echo
  echo "the server's samples per request against plain's (median over repeats; parts in points of plain's total)"
  echo "| server | variant | total | the server's code | the kernel on its threads | contprof's code there | contprof's threads |"
  echo "|---|---|---|---|---|---|---|"
  for s in "${servers[@]}"; do
    comm=$([[ $s == nginx ]] && echo nginx || echo postgres)
    for f in "$tmp/perf.$s".*.data; do
      [[ -f $f ]] || continue
      run=${f#"$tmp/perf.$s."}
      run=${run%.data}
      perf script -i "$f" -F comm,ip,dso --hide-call-graph 2>/dev/null | awk -v run="$run" -v comm="$comm" '
        { c = $1; dso = $NF
          if (c ~ /^contprof-/) threads++
          else if (c == comm) {
            if (dso ~ /kernel/) kernel++
            else if (dso ~ /libcontprof/) code++
            else own++ } }
        END { printf "%s %d %d %d %d\n", run, own, kernel, code, threads }'
    done | python3 -c '
import statistics, sys
server, results = sys.argv[1], sys.argv[2]
tps = {}
for l in open(results):
    w = l.split()
    if len(w) > 3 and w[0] == server:
        tps[(w[1], w[2])] = float(w[3])
per = {}
for l in sys.stdin:
    w = l.split()
    variant, rep = w[0].rsplit(".", 1)
    t = tps.get((variant, rep))
    if t:
        per.setdefault(variant, []).append([int(x) / t for x in w[1:]])
if "plain" not in per:
    sys.exit(0)
med = {v: [statistics.median(r[i] for r in rows) for i in range(4)] for v, rows in per.items()}
base = sum(med["plain"])
for v in sorted(med, key=lambda v: (v != "plain", v)):
    m = med[v]
    parts = ["%+.1f" % (100 * (m[i] - med["plain"][i]) / base) for i in range(4)]
    print("| %s | %s | %+.1f%% | %s |" % (server, v, 100 * (sum(m) / base - 1), " | ".join(parts)))
' "$s" "$results"
  done
fi

for s in "${servers[@]}"; do
  d=$tmp/$([[ $s == nginx ]] && echo nginx || echo pg)/profiled-$REAL_REPEATS
  files=("$d"/*.pb.gz)
  echo
  echo "$s, last profiled run: ${#files[@]} profiles (one per process)"
  for type in cpu-time wall-time alloc-space; do
    echo "top $type:"
    "$BENCH_BUILD_DIR/contprof" top "${files[@]}" --type "$type" -n 10 2>&1 || true
  done
  if [[ -n ${REAL_KEEP:-} ]]; then
    mkdir -p "$REAL_KEEP/$s"
    cp -r "$d" "$REAL_KEEP/$s/"
    [[ -d ${d/profiled-/profiled-b-} ]] && cp -r "${d/profiled-/profiled-b-}" "$REAL_KEEP/$s/"
    cp "$tmp/perf.$s".*.data "$REAL_KEEP/$s/" 2>/dev/null || true
    [[ $s == postgres ]] && cp "$tmp/pg/server.log" "$REAL_KEEP/$s/"
  fi
  # The profiles' own account, by part (docs/overhead.md), summed over the
  # run's processes (an older build's profiles lack the parts: 0).
  for f in "$d"/*.pb.gz; do go tool pprof -comments "$f" 2>/dev/null; done |
    awk -F= '{ v[$1] += $2 }
      END { printf "its cost by part, ms (all processes): process %.0f; profiler threads %.1f (wall timer %.1f, draining %.1f);", v["process_cpu_ns"] / 1e6, v["profiler_threads_cpu_ns"] / 1e6, v["profiler_threads_cpu_ns.wall"] / 1e6, v["profiler_drain_ns"] / 1e6
            printf " hooks %.1f (cpu %.1f, wall %.1f, alloc %.1f, heap %.1f, lock %.1f);", v["profiler_hooks_ns"] / 1e6, v["profiler_hooks_ns.cpu"] / 1e6, v["profiler_hooks_ns.wall"] / 1e6, v["profiler_hooks_ns.alloc"] / 1e6, v["profiler_hooks_ns.heap"] / 1e6, v["profiler_hooks_ns.lock"] / 1e6
            printf " the kernel'"'"'s side of the signals %.1f (cpu %.1f, wall %.1f)\n", v["profiler_kernel_ns"] / 1e6, v["profiler_kernel_ns.cpu"] / 1e6, v["profiler_kernel_ns.wall"] / 1e6 }'
  # With REAL_ENV_B: the second variant's own account of its cost.
  db=$tmp/$([[ $s == nginx ]] && echo nginx || echo pg)/profiled-b-$REAL_REPEATS
  if [[ -d $db ]]; then
    files=("$db"/*.pb.gz)
    echo "profiled-b, last run: $("$BENCH_BUILD_DIR/contprof" top "${files[@]}" --type cpu-time -n 1 2>&1 | grep '^Profiler overhead' || true)"
  fi
done
