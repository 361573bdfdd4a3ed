#!/bin/sh
# The research-and-approve agent's story under valgrind: killed mid-run,
# continued to the approval, approved, replayed, and read back.  Any leak or
# memory error fails.
#   valgrind_agent.sh VALGRIND AGENT_DEMO AGENT_PLUGIN AGENT_CHECK BUILD/examples/agent
set -eu
valgrind=$1 demo=$2 plugin=$3 check=$4 agent_dir=$5
. "$(dirname "$0")/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
vg="$valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible"
c="$dir/c"
new_case "$c"
run_demo "$c" --crash-after-steps 12
crashed "$c"
wrap=$vg
for step in continue approve replay; do
  case $step in
    continue) run_demo "$c" ;;
    approve) answer "$c" ;;
    replay) run_demo "$c" ;;
  esac
  if grep -q '^==[0-9]*==' "$c/out"; then cat "$c/out"; exit 1; fi
done
grep -q '^run research-1: completed' "$c/out"
check_run "$c" "$(repaid "$c")"
echo "ok: no leaks, no memory errors"
