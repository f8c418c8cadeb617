#!/usr/bin/env bash
# The whole test suite: installs what it needs (scripts/setup.sh), then
#   1. the IndexNow protocol rules and the local receiver (plain Rust),
#   2. the extension's pure-Rust tests and its SQL-level #[pg_test]s (cargo pgrx test),
#   3. end-to-end tests on real PostgreSQL 15 clusters with the extension preloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config

bash scripts/setup.sh

echo "== 1/3 protocol rules and the local receiver"
cargo test -p indexnow-protocol -p indexnow-receiver

echo "== 2/3 extension: Rust and SQL-level tests"
# Postgres refuses root: the test cluster runs as the postgres user in a folder it owns.
pgrx_dir=$(mktemp -d /tmp/indexnow-pgrx-test.XXXXXX)
chown postgres:postgres "$pgrx_dir"
trap 'rm -rf "$pgrx_dir"' EXIT
cargo pgrx test pg15 --runas postgres --pgdata "$pgrx_dir/data"

echo "== 3/3 end-to-end: real clusters"
# cargo pgrx test installed a build with the test functions; install the real one.
cargo pgrx install --pg-config "$PG_CONFIG" >/dev/null
cargo test -p indexnow-e2e
