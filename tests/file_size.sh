#!/bin/sh
# No source file is over 900 lines: every tracked .c, .h and .cpp file of
# the tree (git ls-files; outside a git checkout, every such file but those
# of build trees and node_modules).  Says which files are over, and by how
# much, and exits 1.
#   tests/file_size.sh SOURCE_DIR [MAX_LINES]
set -eu
src=${1:?usage: file_size.sh SOURCE_DIR [MAX_LINES]}
max=${2:-900}
list=$(mktemp)
trap 'rm -f "$list"' EXIT
cd "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -- '*.c' '*.h' '*.cpp' >"$list"
else
  find . \( -type d \( -name 'build*' -o -name node_modules -o -name .git \) \
    -prune \) -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) \
    -print | sed 's|^\./||' | sort >"$list"
fi
status=0 n=0
while IFS= read -r f; do
  [ -f "$f" ] || continue # tracked, deleted in the work tree
  n=$((n + 1))
  lines=$(wc -l <"$f")
  if [ "$lines" -gt "$max" ]; then
    echo "$f: $lines lines, over $max by $((lines - max)): split it by subject" >&2
    status=1
  fi
done <"$list"
[ "$n" -gt 0 ] || { echo "no source files found in $src" >&2; exit 1; }
[ $status -ne 0 ] || echo "$n source files, none over $max lines"
exit $status
