#!/usr/bin/env bash
# Makes an installable tree of indexnow per PostgreSQL version, with the paths of that server:
#   target/package/indexnow-<version>-pg<major>/{usr/lib/postgresql/...,usr/share/...}
# Remove the old indexnow.so first (cp rewrites a file in place, and a running server has it
# mapped), then copy the tree over the server's root (`cp -r target/package/indexnow-0.2.0-pg15/. /`);
# or make a .deb/.rpm of it. With no argument, one tree for each version that scripts/setup.sh installed.
#   bash scripts/package.sh [--debug] [--pg-config PATH]...   (default: a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versions.sh
version=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)

configs=()
profile=()
while [ $# -gt 0 ]; do
  case "$1" in
    --pg-config) configs+=("$2"); shift 2 ;;
    --debug) profile=(--debug); shift ;;
    *) echo "package.sh: unknown argument $1 (expected --pg-config PATH, --debug)" >&2; exit 2 ;;
  esac
done
if [ ${#configs[@]} -eq 0 ]; then
  for v in "${INDEXNOW_PG_VERSIONS[@]}"; do
    c=$(pg_config_of "$v")
    [ -n "$c" ] && configs+=("$c")
  done
fi

for pg_config in "${configs[@]}"; do
  major=$(pg_major_of "$pg_config")
  out="target/package/indexnow-$version-pg$major"
  rm -rf "$out"
  cargo pgrx package "${profile[@]}" --pg-config "$pg_config" --no-default-features --features "pg$major" --out-dir "$out" >/dev/null
  # Beside the install script cargo pgrx made: the upgrade scripts, and the older releases'
  # install scripts this library can run.
  extension_dir="$out$("$pg_config" --sharedir)/extension"
  check_kept_install_script "$extension_dir"
  install_shipped_scripts "$extension_dir" "$out$("$pg_config" --pkglibdir)/indexnow.so"
  # What a server needs, or the tree is not a package.
  for f in "$("$pg_config" --pkglibdir)/indexnow.so" "$("$pg_config" --sharedir)/extension/indexnow.control" \
           "$("$pg_config" --sharedir)/extension/indexnow--$version.sql"; do
    [ -f "$out$f" ] || { echo "package.sh: $out$f is missing" >&2; exit 1; }
  done
  echo "$out"
  (cd "$out" && find . -type f | sort | sed 's/^/  /')
done
