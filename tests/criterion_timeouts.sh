#!/bin/sh
# Every Criterion test file gives its tests at most one `.timeout` value.
# Criterion 2.4.1's runner leaks its record of a timeout when two tests with
# different timeouts run at once (--jobs 2), and the sanitizer build fails
# on that leak although no code of ours is in it.  Says which files mix
# values and exits 1.
#   tests/criterion_timeouts.sh SOURCE_DIR
set -eu
src=${1:?usage: criterion_timeouts.sh SOURCE_DIR}
status=0 n=0
for f in "$src"/tests/*.c; do
  n=$((n + 1))
  values=$(grep -o '\.timeout *= *[0-9]*' "$f" | tr -d ' ' | sort -u | tr '\n' ' ')
  count=$(printf '%s' "$values" | wc -w)
  if [ "$count" -gt 1 ]; then
    echo "$f: tests with different timeouts ($values): give them one" >&2
    status=1
  fi
done
[ "$n" -gt 0 ] || { echo "no test files found in $src/tests" >&2; exit 1; }
exit $status
