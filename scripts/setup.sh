#!/usr/bin/env bash
# One setup path for the demo and the tests: installs what is missing on a Debian machine (as root)
# and skips what is there. Safe to run any number of times.
#   PostgreSQL 15 server and headers, clang/libclang (bindgen), sudo (Postgres refuses root, so
#   clusters run as the postgres user), cargo-pgrx 0.18.1, and `cargo pgrx init` for PostgreSQL 15.
set -euo pipefail

PGRX_VERSION=0.18.1
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-client-15 libclang-dev clang sudo pkg-config build-essential ca-certificates)

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
command -v cargo >/dev/null || { echo "setup: cargo is required (Rust toolchain)" >&2; exit 1; }

if cargo pgrx --version 2>/dev/null | grep -q " ${PGRX_VERSION}\$"; then
  say "cargo-pgrx ${PGRX_VERSION} present"
else
  say "installing cargo-pgrx ${PGRX_VERSION} (about 10 minutes on 2 cores)"
  cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked --quiet
fi

if grep -qs "^pg15 *= *\"${PG_CONFIG}\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
  say "cargo pgrx already initialised for PostgreSQL 15"
else
  say "cargo pgrx init --pg15 ${PG_CONFIG}"
  cargo pgrx init --pg15 "${PG_CONFIG}" >/dev/null
fi
