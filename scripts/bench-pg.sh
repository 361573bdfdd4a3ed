#!/usr/bin/env bash
# The PostgreSQL figures of bench/README.md: pl-bench's W1 and W3 on the
# PostgreSQL store, next to a raw libpq floor on the same server, against a
# private PostgreSQL server in a temporary directory (tests/pg_run.sh starts
# it and stops it at the end).
#   scripts/bench-pg.sh [PL-BENCH OPTION...]    e.g. --quick, --json
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test # the PostgreSQL server
cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release -DPL_BUILD_TESTS=OFF \
      >/dev/null
cmake --build build-rel -j"$(nproc)" --target pl-bench >/dev/null
# pg_run.sh exports the server's URI as PL_TEST_PG_URI; the figures are
# for a server that flushes its WAL, as a real one does
PL_PG_FSYNC=on exec sh tests/pg_run.sh sh -c \
     'exec build-rel/bench/pl-bench --store "$PL_TEST_PG_URI" "$@"' \
     pl-bench "$@"
