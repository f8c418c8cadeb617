# Sourced by the demo and the benchmarks: a throwaway cluster run as the postgres user, of the
# PostgreSQL whose programs are in PG_BIN (Debian's PostgreSQL 15 unless the caller set it).
# cluster_start DIR PORT [postgresql.conf lines...]; cluster_stop DIR; psql_site ARGS...
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

cluster_start() {
  local dir=$1 port=$2; shift 2
  rm -rf "$dir"; mkdir -p "$dir"; chown postgres:postgres "$dir"
  sudo -n -u postgres "$PG_BIN/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale C.UTF-8 --no-sync >/dev/null
  {
    echo "port = $port"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'indexnow'"
    for line in "$@"; do echo "$line"; done
  } >> "$dir/data/postgresql.conf"
  sudo -n -u postgres "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}

cluster_stop() {
  local dir=$1
  [ -d "$dir/data" ] && sudo -n -u postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}

# The first port from 54329 on that nothing listens on (bash's /dev/tcp: no extra tools needed).
free_port() {
  local p
  for p in $(seq 54329 54429); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "no free port in 54329-54429" >&2; return 1
}
