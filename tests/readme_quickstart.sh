#!/bin/sh
# The README shows examples/quickstart.c as it is (its first C block is the
# program from its first #include on, line for line), and the reminder
# workflow of examples/reminder.c (its second C block); and its first
# screen (below).
set -eu
src=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
awk '/^```c$/ && !n { on = 1; n = 1; next } on && /^```$/ { exit } on' \
    "$src/README.md" > "$dir/readme.c"
sed -n '/^#include/,$p' "$src/examples/quickstart.c" > "$dir/quickstart.c"
if ! diff -u "$dir/quickstart.c" "$dir/readme.c"; then
    echo "README.md's quickstart differs from examples/quickstart.c (above):" \
         "copy the program into the README" >&2
    exit 1
fi
echo "ok: README.md shows examples/quickstart.c"
# Its second C block (the reminder workflow) is examples/reminder.c's
# approval(), line for line.
awk '/^```c$/ { n++; if (n == 2) { on = 1; next } } on && /^```$/ { exit } on' \
    "$src/README.md" > "$dir/readme2.c"
[ -s "$dir/readme2.c" ] || { echo "README.md has no second C block" >&2; exit 1; }
if ! python3 -c 'import sys; a=open(sys.argv[1]).read(); b=open(sys.argv[2]).read(); sys.exit(0 if a in b else 1)' \
     "$dir/readme2.c" "$src/examples/reminder.c"; then
    echo "README.md's reminder workflow is not examples/reminder.c's:" \
         "copy approval() into the README" >&2
    exit 1
fi
echo "ok: README.md shows examples/reminder.c's approval()"
# The first screen: at most 250 lines in all, and what a newcomer needs
# first, in this order, before the quickstart: the requirements, the two
# commands, the build and install by hand (within its first 60 lines).
lines=$(wc -l <"$src/README.md")
[ "$lines" -le 250 ] || {
  echo "README.md is $lines lines: at most 250 (move detail to docs/)" >&2; exit 1; }
at() { grep -n -m1 "^## $1" "$src/README.md" | cut -d: -f1; }
req=$(at Requirements) two=$(at 'The two commands') by_hand=$(at 'Building and installing') quick=$(at Quickstart)
if [ -z "$req" ] || [ -z "$two" ] || [ -z "$by_hand" ] || [ -z "$quick" ] ||
   [ "$req" -ge "$two" ] || [ "$two" -ge "$by_hand" ] || [ "$by_hand" -ge "$quick" ] ||
   [ "$by_hand" -gt 60 ]; then
  echo "README.md's first screen: Requirements ($req), The two commands ($two)," \
       "Building and installing ($by_hand, by line 60), then Quickstart ($quick)" >&2
  exit 1
fi
echo "ok: README.md is $lines lines, requirements, commands and build first"
# The benchmark table: at most five rows (the rest is bench/README.md's)
rows=$(sed -n '/^## Benchmarks/,/^## /p' "$src/README.md" | grep -c '^| [^-]')
[ "$rows" -le 6 ] || {
  echo "README.md's benchmark table has $((rows - 1)) rows: at most 5" >&2; exit 1; }
