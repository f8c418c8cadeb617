#!/usr/bin/env bash
# Makes an installable tree of indexnow per PostgreSQL version, with the paths of that server:
#   target/package/indexnow-<version>-pg<major>/{usr/lib/postgresql/...,usr/share/...}
# Remove the old indexnow.so first (cp rewrites a file in place, and a running server has it
# mapped), then copy the tree over the server's root (`cp -r target/package/indexnow-0.2.0-pg15/. /`);
# or install the Debian package made beside it:
#   target/package/postgresql-<major>-indexnow_<version>-1_amd64.deb   (dpkg -i; see make_deb)
# With no argument, one of each for each version that scripts/setup.sh installed.
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

# The Debian package of the tree $1 (built with pg_config $2, for major version $3), named as PGDG
# names an extension's (`postgresql-NN-indexnow`) and installed where Debian's and PGDG's server
# of that major version looks (`/usr/lib/postgresql/NN/lib`, `/usr/share/postgresql/NN/extension`),
# whatever server it was built with: the library depends on the major version only. With the
# documentation and the license. Prints its path.
make_deb() {
  local tree=$1 pg_config=$2 major=$3
  local name="postgresql-$major-indexnow"
  local root="target/package/deb-$major"
  local deb="target/package/${name}_${version}-1_amd64.deb"
  rm -rf "$root"
  install -D -m 644 "$tree$("$pg_config" --pkglibdir)/indexnow.so" "$root/usr/lib/postgresql/$major/lib/indexnow.so"
  mkdir -p "$root/usr/share/postgresql/$major/extension" "$root/usr/share/doc/$name" "$root/DEBIAN"
  install -m 644 "$tree$("$pg_config" --sharedir)"/extension/indexnow* "$root/usr/share/postgresql/$major/extension/"
  install -m 644 README.md "$root/usr/share/doc/$name/"
  install -m 644 docs/*.md "$root/usr/share/doc/$name/"
  install -m 644 LICENSE "$root/usr/share/doc/$name/copyright"
  cat >"$root/DEBIAN/control" <<CONTROL
Package: $name
Version: $version-1
Architecture: amd64
Maintainer: the indexnow authors <indexnow@localhost>
Depends: postgresql-$major, libc6 (>= 2.34), libgcc-s1
Section: database
Priority: optional
Installed-Size: $(du -sk "$root/usr" | cut -f1)
Description: IndexNow for PostgreSQL $major: search engines told of every page change
 A PostgreSQL extension that keeps search engines in the IndexNow network told
 about every page a site adds, changes or removes: capture triggers on the
 watched tables, a queue, and background workers that send it in batches.
 Add indexnow to shared_preload_libraries, restart, and CREATE EXTENSION
 indexnow (/usr/share/doc/$name/operations.md).
CONTROL
  # (gzip at its fastest: a debug build's library is large, and xz takes minutes over it)
  dpkg-deb --root-owner-group -Zgzip -z1 --build "$root" "$deb" >/dev/null
  echo "$deb"
}

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
  make_deb "$out" "$pg_config" "$major"
done
