#!/bin/sh
# The module maps name every C file of their folders, and nothing else:
# core/internal.h maps core/, ledger/store.h maps ledger/.  A map line is
# "<folder>/" opening a folder, or "<file>.c" (in the last folder opened),
# at the start of the comment's text.
#   tests/module_map.sh SOURCE_DIR
set -eu
src=${1:?usage: module_map.sh SOURCE_DIR}
status=0

check() { # check DIR MAP_HEADER
  dir=$1 header=$2
  mapped=$(awk '
    /^ \*\/$/ { exit }
    /^ \*   [a-z_]+\/ / { folder = $2; next }
    /^ \*   [a-z_]+\.c / { print $2; next }
    /^ \*     [a-z_]+\.c( |$)/ { print folder $2 }
  ' "$src/$header" | sort)
  actual=$(cd "$src/$dir" && find . -name '*.c' | sed 's|^\./||' | sort)
  missing=$(printf '%s\n' "$actual" | grep -vxF -e "$mapped" || true)
  stale=$(printf '%s\n' "$mapped" | grep -vxF -e "$actual" || true)
  for f in $missing; do
    echo "$header: the module map does not name $dir/$f" >&2
    status=1
  done
  for f in $stale; do
    echo "$header: the module map names $dir/$f, which does not exist" >&2
    status=1
  done
  n=$(printf '%s\n' "$mapped" | grep -c . || true)
  [ "$n" -gt 0 ] || { echo "$header: no module map found" >&2; status=1; }
  echo "$header: $n files mapped"
}

check core core/internal.h
check ledger ledger/store.h
exit $status
