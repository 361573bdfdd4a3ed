#!/bin/sh
# The README shows examples/quickstart.c as it is: its first C block is the
# program from its first #include on, line for line.
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
