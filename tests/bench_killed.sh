#!/bin/sh
# pl-bench killed with SIGKILL while a workload runs in its child: the
# child ends with it, rather than going on loading the CPU and the disk
# under whatever is measured next (or, stopped, staying for good).
#   bench_killed.sh PL_BENCH
set -eu
bench=${1:?usage: bench_killed.sh PL_BENCH}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$bench" --quick --only w1,w3 --dir "$dir/stores" >/dev/null 2>&1 &
parent=$!
# a workload's child, stopped so that it cannot end on its own first (a
# SIGKILL still ends a stopped process): polled, each child lives briefly
alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# past child_bind() (bench_util.c), which asks for SIGKILL when pl-bench
# dies: only then is the child's end pl-bench's to keep (stopped between
# its fork and that call, it could not make it).  The child closes its
# result pipe's read end right after, so no pipe is open twice in it then.
bound() {
  [ -d "/proc/$1/fd" ] &&
    [ -z "$(ls -l "/proc/$1/fd" 2>/dev/null | grep -o 'pipe:\[[0-9]*\]' | sort | uniq -d)" ]
}
child=
i=0
while [ -z "$child" ] && [ $i -lt 2000 ]; do
  c=$(cat /proc/$parent/task/*/children 2>/dev/null | tr ' ' '\n' |
      grep . | head -n 1 || true)
  if [ -n "$c" ] && kill -STOP "$c" 2>/dev/null && alive "$c" && bound "$c"; then
    child=$c
  else
    [ -z "$c" ] || kill -CONT "$c" 2>/dev/null || true
    i=$((i + 1)); sleep 0.005
  fi
done
[ -n "$child" ] || { kill -9 $parent; echo "FAIL: pl-bench started no child"; exit 1; }
kill -9 $parent
wait $parent 2>/dev/null || true
# gone within 10 s (at once, in fact): stopped, it would wait for good
i=0
while alive "$child" && [ $i -lt 1000 ]; do
  i=$((i + 1)); sleep 0.01
done
if alive "$child"; then
  kill -9 "$child"
  echo "FAIL: pl-bench's child $child went on after pl-bench was killed"
  exit 1
fi
echo "ok: the workload's child ended with pl-bench"
