#!/bin/sh
# The research-and-approve agent killed (SIGKILL) at every step boundary in
# turn, first on its way to the approval, then while the approval is
# resumed; each run is then continued to the end, and must come out as an
# uncrashed run does: the same answer, a ledger that verifies, every model
# exchange recorded once, every tool run once.  Odd kills are finished by
# ledger-replay (with the plugin), even ones by agent-demo.
#   agent_crash.sh AGENT_DEMO AGENT_PLUGIN AGENT_CHECK BUILD/examples/agent LEDGER_REPLAY
set -eu
demo=$1 plugin=$2 check=$3 agent_dir=$4 replay=$5
. "$(dirname "$0")/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# The uncrashed run.
new_case "$dir/clean"
run_demo "$dir/clean"
grep -q '^run research-1: suspended' "$dir/clean/out"
answer "$dir/clean"
check_run "$dir/clean"

# Killed on the way to the approval, at boundary n = 1, 2, ...
n=1 phase1=0
while :; do
  c="$dir/a$n"
  new_case "$c"
  run_demo "$c" --crash-after-steps "$n"
  if ! crashed "$c"; then rm -rf "$c"; break; fi
  if [ $((n % 2)) -eq 1 ]; then finish_replay "$c"; else finish "$c"; fi
  check_run "$c" "$(repaid "$c")"
  rm -rf "$c"
  n=$((n + 1)) phase1=$((phase1 + 1))
done

# Killed while the approval is resumed.
n=1 phase2=0
while :; do
  c="$dir/b$n"
  new_case "$c"
  run_demo "$c"
  answer "$c" --crash-after-steps "$n"
  if ! crashed "$c"; then rm -rf "$c"; break; fi
  if [ $((n % 2)) -eq 1 ]; then finish_replay "$c"; else finish "$c"; fi
  check_run "$c"
  rm -rf "$c"
  n=$((n + 1)) phase2=$((phase2 + 1))
done
[ "$phase1" -ge 10 ] && [ "$phase2" -ge 2 ] || {
  echo "FAIL: too few boundaries ($phase1, $phase2)"; exit 1; }
echo "ok: killed at each of $phase1 boundaries before the approval and $phase2 after it; every run finished with the same answer"
