#!/bin/sh
# Run the demo under valgrind: a run that crashes (SIGKILL) and the run that
# recovers it.  Any leak or memory error fails.
set -eu
valgrind=$1
demo=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
vg="$valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible"
# a crash, then the recovery under valgrind
"$demo" --store "$dir/s.db" --effects "$dir/e" --crash-after 8 --quiet >/dev/null 2>&1 || true
$vg "$demo" --store "$dir/s.db" --effects "$dir/e" --quiet
# a whole run from scratch under valgrind, in each durability mode
for mode in sync group process; do
  $vg "$demo" --store "$dir/$mode.db" --effects "$dir/e.$mode" --durability "$mode" --quiet
done
echo "ok: no leaks, no memory errors"
