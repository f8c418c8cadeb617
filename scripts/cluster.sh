# Sourced by the demo: a throwaway PostgreSQL 15 cluster run as the postgres user.
# cluster_start DIR PORT [postgresql.conf lines...]; cluster_stop DIR; psql_site ARGS...
PG_BIN=/usr/lib/postgresql/15/bin

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

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
