# Sourced by bench/real/real.sh and side_by_side.sh: what a PostgreSQL
# server of theirs is made of, and the wait for it to accept connections.
# PG_BIN: the newest installed server's programs.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)

# pg_initdb DIR: a cluster in DIR/data, and DIR/sock for its socket, owned
# by postgres (trust authentication, superuser postgres).
pg_initdb() {
  local d=$1
  mkdir -p "$d/sock"
  chown -R postgres "$d"
  setpriv --reuid=postgres --regid="$(id -g postgres)" --clear-groups \
    "$PG_BIN/initdb" -D "$d/data" -A trust -U postgres >"$d/initdb.log" 2>&1 ||
    bench_die "initdb failed: $(tail -3 "$d/initdb.log")"
}

# pg_command DIR PORT: the server's command line for the cluster pg_initdb
# made in DIR, on 127.0.0.1:PORT (synchronous_commit off: the server's CPU,
# not the disk, is what the benchmarks measure).
pg_command() {
  echo "$PG_BIN/postgres -D $1/data -p $2 -k $1/sock -c listen_addresses=127.0.0.1" \
    "-c synchronous_commit=off -c max_connections=50"
}

# pg_wait PORT LOG: returns once the server on PORT accepts connections (at
# most 20 s, then the benchmark stops with LOG's last lines).
pg_wait() {
  for _ in $(seq 1 200); do
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" && return 0
    sleep 0.1
  done
  bench_die "postgres did not start: $(tail -5 "$2")"
}
