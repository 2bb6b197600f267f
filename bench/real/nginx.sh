# Sourced by bench/real/real.sh and side_by_side.sh: what an nginx server
# of theirs is made of, and the wait for it to listen.

# nginx_dir DIR PORT WORKERS: DIR/nginx.conf for a server of WORKERS worker
# processes on 127.0.0.1:PORT serving DIR/www/index.html (4 KiB of text),
# its temporary files, pid and log in DIR, owned by nobody.
nginx_dir() {
  local d=$1
  mkdir -p "$d/www" "$d/temp"
  head -c 4096 /dev/urandom | base64 -w 76 | head -c 4096 >"$d/www/index.html"
  cat >"$d/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes $3;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $d/temp/body;
  proxy_temp_path $d/temp/proxy;
  fastcgi_temp_path $d/temp/fastcgi;
  uwsgi_temp_path $d/temp/uwsgi;
  scgi_temp_path $d/temp/scgi;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$2;
    location / { root $d/www; }
  }
}
CONF
  chown -R nobody "$d"
}

# wait_port PORT: returns once something listens on 127.0.0.1:PORT (at most
# 10 s, then the benchmark stops).
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  bench_die "nothing listens on 127.0.0.1:$1"
}
