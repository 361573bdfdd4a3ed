#!/bin/sh
# The pool's tests under valgrind: its tasks run on stacks of their own, and
# valgrind must find no memory error and no definite or indirect leak there
# either.  Only those fail the test: valgrind's exit code for the runner,
# and, for the Criterion workers whose exit code the runner does not pass
# on, valgrind's error and leak reports in the output.  Anything else it may
# print (a block "possibly lost" in a thread still alive at a worker's
# exit, a warning) is shown but is not an error.
set -eu
valgrind=$1
test_pool=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"$valgrind" -q --error-exitcode=99 --trace-children=yes --leak-check=full \
  --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
  "$test_pool" --jobs 2 >"$out" 2>&1 || rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: test_pool under valgrind exited $rc" >&2
  exit 1
fi
if grep -Eq '==[0-9]+== +(Invalid|Conditional|Use of uninit|Syscall param|Mismatched|Source and destination|[0-9,]+ bytes in [0-9,]+ blocks are (definitely|indirectly))' "$out"; then
  echo "FAIL: valgrind reported an error" >&2
  exit 1
fi
echo "ok: no memory errors, no leaks"
