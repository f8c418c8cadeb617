#!/usr/bin/env bash
# Builds indexnow and installs it into an existing PostgreSQL (15, 16 or 18): the library into its
# `pg_config --pkglibdir`, the control file, this release's install script and every upgrade
# script into `pg_config --sharedir`/extension. Needs the Rust toolchain, cargo-pgrx 0.18.1
# (scripts/setup.sh installs it) and the server's headers (`pg_config --includedir-server`).
#   bash scripts/install.sh [--debug] [--pg-config PATH]    (default: pg_config on PATH)
# Then: shared_preload_libraries = 'indexnow' in postgresql.conf, restart, CREATE EXTENSION indexnow.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versions.sh

pg_config=$(command -v pg_config || true)
profile=(--release)
while [ $# -gt 0 ]; do
  case "$1" in
    --pg-config) pg_config=$2; shift 2 ;;
    --debug) profile=(); shift ;;
    *) echo "install.sh: unknown argument $1 (expected --pg-config PATH, --debug)" >&2; exit 2 ;;
  esac
done
[ -n "$pg_config" ] && [ -x "$pg_config" ] || { echo "install.sh: no pg_config (give --pg-config PATH)" >&2; exit 2; }
major=$(pg_major_of "$pg_config")
case " ${INDEXNOW_PG_VERSIONS[*]} " in
  *" $major "*) ;;
  *) echo "install.sh: PostgreSQL $major is not one indexnow is built for (${INDEXNOW_PG_VERSIONS[*]})" >&2; exit 2 ;;
esac

cargo pgrx install "${profile[@]}" --pg-config "$pg_config" --no-default-features --features "pg$major"
# cargo pgrx writes this release's install script; the upgrade scripts between releases, and the
# older releases' install scripts this library can run, are kept in sql/ and copied beside it.
extension_dir="$("$pg_config" --sharedir)/extension"
check_kept_install_script "$extension_dir"
install_shipped_scripts "$extension_dir" "$("$pg_config" --pkglibdir)/indexnow.so"
echo "installed indexnow $(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1) into PostgreSQL $major ($extension_dir)"
