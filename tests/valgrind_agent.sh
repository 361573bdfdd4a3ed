#!/bin/sh
# The research-and-approve agent's story under valgrind: killed mid-run,
# then continued to the approval, approved, replayed and read back, once by
# agent-demo and once by ledger-replay and ledger-dump (agent-check, which
# checks both runs, under valgrind once).  Any leak or memory error fails.
#   valgrind_agent.sh VALGRIND AGENT_DEMO AGENT_PLUGIN AGENT_CHECK
#                     BUILD/examples/agent LEDGER_REPLAY LEDGER_DUMP
set -eu
valgrind=$1 demo=$2 plugin=$3 check=$4 agent_dir=$5 replay=$6 dump=$7
. "$(dirname "$0")/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
vg="$valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible"
clean() { if grep -q '^==[0-9]*==' "$1/out"; then cat "$1/out"; exit 1; fi; }

# agent-demo does it all
c="$dir/demo"
new_case "$c"
run_demo "$c" --crash-after-steps 12
crashed "$c"
wrap=$vg
run_demo "$c"; clean "$c"
grep -q '^run research-1: suspended' "$c/out"
run_demo "$c" --answer '{"approved": true}'; clean "$c"
run_demo "$c"; clean "$c"
grep -q '^run research-1: completed' "$c/out"
check_run "$c" "$(repaid "$c")"

# ledger-replay finishes and resumes, ledger-dump shows and verifies
wrap=
c="$dir/tools"
new_case "$c"
run_demo "$c" --crash-after-steps 8
crashed "$c"
export AGENT_MODEL="scripted://$c/script.json" AGENT_DATA="$agent_dir/data"
rc=0; $vg "$replay" "$c/s.db" --plugin "$plugin" --run research-1 >"$c/out" 2>&1 || rc=$?
clean "$c"
[ "$rc" -eq 4 ] || { cat "$c/out"; echo "FAIL: ledger-replay --run exited $rc"; exit 1; }
$vg "$replay" "$c/s.db" --plugin "$plugin" --resume research-1 --answer '{"approved": true}' >"$c/out" 2>&1 || { cat "$c/out"; exit 1; }
clean "$c"
$vg "$dump" "$c/s.db" --run research-1 >"$c/out" 2>&1 || { cat "$c/out"; exit 1; }
clean "$c"
$vg "$dump" "$c/s.db" --verify --run research-1 >"$c/out" 2>&1 || { cat "$c/out"; exit 1; }
clean "$c"
grep -q 'checked, 0 fault' "$c/out"
# agent-check reads the store as it read the first case's, under valgrind
# there: here its checks alone
check_run "$c"
echo "ok: no leaks, no memory errors"
