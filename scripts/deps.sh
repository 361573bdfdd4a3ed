#!/usr/bin/env bash
# Install the Debian packages policyledger needs that are missing.
#   scripts/deps.sh          what the library, tools, demo and benchmark need
#                            (tzdata: the zones of cron schedules)
#   scripts/deps.sh --test   and what the tests and checks need (Criterion,
#                            valgrind, g++ for the header's C++ check,
#                            clang-format for scripts/format.sh, python3 for
#                            the HTTP servers of tests/test_tools.c and the
#                            LLM tests and the tools' tests, the official
#                            JSON-Schema-Test-Suite, the PostgreSQL server
#                            tests/test_pg.c runs on, node and npm for the
#                            reference MCP servers of tests/test_mcp.c and
#                            the browser tests of ledger-web, which drive
#                            Debian's chromium, clang 19 and its runtimes
#                            for the sanitizer build: scripts/test.sh
#                            --sanitize; lmdb-utils for the backup with
#                            mdb_copy that tests/test_store_backup.c makes)
#   scripts/deps.sh --test-build   what building the test suite needs
#                            (Criterion, g++, valgrind's header, python3), not
#                            what running it needs: .ci/run builds the
#                            suite while the rest (--test) installs
#   scripts/deps.sh --fuzz   and clang 19 with libFuzzer (scripts/fuzz.sh)
set -euo pipefail

pkgs=(gcc libc6-dev make cmake pkg-config
      liblmdb-dev libpq-dev libmsgpack-dev libcjson-dev libssl-dev libcurl4-openssl-dev
      libmicrohttpd-dev tzdata)
case "${1:-}" in
  --test | --test-build) pkgs+=(libcriterion-dev valgrind g++ python3) ;;
esac
if [ "${1:-}" = "--test" ]; then
  pkgs+=(clang-format json-schema-test-suite postgresql nodejs chromium
         clang-19 libclang-rt-19-dev lld-19 lmdb-utils)
  # npm is Debian's own package, unless the nodejs installed brings it
  command -v npm >/dev/null || pkgs+=(npm)
fi
if [ "${1:-}" = "--fuzz" ]; then
  pkgs+=(clang-19 libclang-rt-19-dev lld-19)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "deps: installing ${missing[*]}"
$sudo apt-get update -qq
# Under CI (CI=true, a machine made for the run and thrown away) dpkg skips
# its fsync()s: most of an install's time on a slow disk, and nothing to
# keep if the machine stops
unsafe=()
[ "${CI:-}" = true ] && unsafe=(-o Dpkg::Options::=--force-unsafe-io)
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${unsafe[@]}" "${missing[@]}" >/dev/null
