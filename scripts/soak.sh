#!/usr/bin/env bash
# The long soak: real load (pgbench, 8 connections) on a watched bilingual site, with the worker
# SIGKILLed, the launcher terminated, the server restarted -m immediate, the xmin horizon held and
# the local receiver answering with faults; then the queue drains and a checker compares the
# content, the queue and what the receiver accepted. Prints its figures; exits 1 on a violation.
#
#   SOAK_SECONDS=1800 SOAK_SEED=1 bash scripts/soak.sh
#
# (A one-minute form runs with the tests: tests/e2e/tests/soak.rs.) See docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null
exec cargo run --release -q -p indexnow-e2e --bin soak
