#!/usr/bin/env bash
# The source checks: banned calls (scripts/checksrc.sh), then formatting
# (scripts/format.sh --check).  Both run; exits non-zero if either fails.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
scripts/checksrc.sh || status=1
scripts/format.sh --check || status=1
exit $status
