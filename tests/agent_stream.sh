#!/bin/sh
# scripts/agent-demo.sh --stream, offline: the model's answers print as
# they are written, a turn at a time; the turn the crash left recorded is
# printed again from the ledger, whole; the run and its store are the
# story's, streaming or not.
#   agent_stream.sh SOURCE_DIR BUILD_DIR AGENT_CHECK
set -eu
src=$1 build=$2 check=$3
demo=$build/examples/agent-demo plugin=$build/examples/agent-plugin.so
agent_dir=$build/examples/agent
. "$src/tests/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
AGENT_DEMO_DIR="$dir" "$src/scripts/agent-demo.sh" --stream "$build" \
  >"$dir/log" 2>&1 || {
  cat "$dir/log"; echo "FAIL: agent-demo.sh --stream failed"; exit 1; }
cat "$dir/log"
has() { grep -q -- "$1" "$dir/log" || { echo "FAIL: the streamed story did not say: $1"; exit 1; }; }
count() { grep -c -- "$1" "$dir/log" || true; }
has '^   model, turn 1: I will search the notes for the vans and read the fleet notes first\.$'
has '^      -> search_notes {"query":"van"}$'
has '^   model, turn 1 (from the ledger): I will search the notes'
has '^      -> calculator {"expression":"12 \* 4250 \* 3"}$'
has "^   model, turn 4: $expected_answer\$"
has "^answer: $expected_answer"
has 'scripted model requests served: 4'
# each live turn was streamed once, the recorded one replayed once more
[ "$(count '^   model, turn [1-4]: ')" -eq 4 ] || {
  echo "FAIL: four turns should have streamed live"; exit 1; }
# the script the demo ran wrote at a reader's pace; the store is the story's
grep -q '"stream_delay_ms"' "$dir/script.json" || {
  echo "FAIL: the streamed demo's model does not pause between words"; exit 1; }
db=agent.db check_run "$dir"
echo "ok: the story streamed, and its run holds"
