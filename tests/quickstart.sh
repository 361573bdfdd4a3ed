#!/bin/sh
# The README's program: the first run executes both calls, the second
# serves both from the ledger.
set -eu
qs=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
first=$("$qs" "$dir/qs.db")
second=$("$qs" "$dir/qs.db")
echo "$first"; echo "$second"
echo "$first" | grep -q 'completed {"total":6}: calls executed 2, served from the ledger 0'
echo "$second" | grep -q 'completed {"total":6}: calls executed 0, served from the ledger 2'
