#!/bin/sh
# tests/file_size.sh fails on a file one line over the limit, naming it, and
# passes a tree whose largest file is at the limit.
#   tests/file_size_selftest.sh SOURCE_DIR
set -eu
check="${1:?usage: file_size_selftest.sh SOURCE_DIR}/tests/file_size.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/core" "$dir/build/x"
seq 900 >"$dir/core/at.c"
seq 2000 >"$dir/build/x/generated.c" # a build tree's file is not a source
status=0
sh "$check" "$dir" >"$dir/out" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: a tree at the limit gave status $status:" >&2
  cat "$dir/out" >&2
  exit 1
fi
seq 901 >"$dir/core/over.h"
status=0
sh "$check" "$dir" >"$dir/out" 2>&1 || status=$?
if [ "$status" -ne 1 ]; then
  echo "FAIL: a file of 901 lines gave status $status, expected 1" >&2
  cat "$dir/out" >&2
  exit 1
fi
grep -q "^core/over.h: 901 lines, over 900 by 1" "$dir/out" || {
  echo "FAIL: the file over the limit is not named:" >&2
  cat "$dir/out" >&2
  exit 1
}
if grep -q "at.c" "$dir/out"; then
  echo "FAIL: a file at the limit is named:" >&2
  cat "$dir/out" >&2
  exit 1
fi
echo "ok"
