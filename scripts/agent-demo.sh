#!/usr/bin/env bash
# The durable research-and-approve agent, offline: a model (the scripted
# model shipped in examples/agent/script.json) researches a question with
# read_file, http_get and calculator, then waits for a human to approve.
# The process is killed mid-run; ledger-replay finishes it without asking
# the model again for anything it had answered; a human approves; the
# answer prints; ledger-dump shows the run's tree.
#
#   scripts/agent-demo.sh [--stream] [BUILD_DIR]
#                         (default build; build it first, or run
#                         scripts/demo.sh)
# --stream prints the model's answers as they are written (the scripted
# model writes a word at a time); turns served from the ledger come whole.
# AGENT_DEMO_DIR names the directory for the store (default: a new one).
set -euo pipefail
cd "$(dirname "$0")/.."
stream=
if [ "${1:-}" = --stream ]; then stream=1; shift; fi
build=${1:-build}
demo=$build/examples/agent-demo plugin=$build/examples/agent-plugin.so
replay=$build/tools/ledger-replay dump=$build/tools/ledger-dump
for f in "$demo" "$plugin" "$replay" "$dump"; do
  [ -e "$f" ] || { echo "agent-demo.sh: $f is missing: build first (scripts/demo.sh)" >&2; exit 2; }
done
dir=${AGENT_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/policyledger-agent.XXXXXX")}
mkdir -p "$dir"
store="$dir/agent.db" run=research-1
rm -f "$store" "$store-lock" "$dir/script.json.served" # a story afresh
if [ -n "$stream" ]; then # the scripted model writes at a reader's pace
  sed 's/^{"responses": \[/{"stream_delay_ms": 25, "responses": [/' \
    "$build/examples/agent/script.json" >"$dir/script.json"
  export AGENT_STREAM=1
else
  cp "$build/examples/agent/script.json" "$dir/script.json"
fi
# The plugin's configuration, for agent-demo and ledger-replay alike.
export AGENT_MODEL="scripted://$dir/script.json"
AGENT_DATA="$(cd "$build/examples/agent/data" && pwd)"
export AGENT_DATA
served() { if [ -f "$dir/script.json.served" ]; then wc -l <"$dir/script.json.served" | tr -d ' '; else echo 0; fi; }

echo "== 1. The agent researches.  Kill it (SIGKILL) at step boundary 24: its"
echo "==    first model call and its first tool calls are durable: search_notes"
echo "==    (two pages, each a recorded call) and read_file."
# (the braces keep the shell's own "Killed" notice off the screen)
{ "$demo" --store "$store" --run "$run" --model "$AGENT_MODEL" \
    --data "$AGENT_DATA" --crash-after-steps 24 2>&1; } 2>/dev/null ||
  echo "   (the process died: exit status $?)"
before=$(served)
echo "   the model has been asked $before time(s) so far"
echo
echo "== 2. ledger-replay finishes the run from its ledger, up to the approval."
"$replay" "$store" --plugin "$plugin" --run "$run" || [ $? -eq 4 ]
after=$(served)
echo "   the model was asked $before time(s) before, $after in all: only the"
echo "   $((after - before)) call(s) not yet made were made; none was repeated"
echo
echo "== 3. A human approves the answer."
"$replay" "$store" --plugin "$plugin" --resume "$run" --answer '{"approved": true}'
echo
echo "== 4. The answer (agent-demo replays the finished run: nothing is asked again)."
"$demo" --store "$store" --run "$run" --model "$AGENT_MODEL" --data "$AGENT_DATA"
echo
echo "== 5. The run's tree, and its hash chains checked."
"$dump" "$store" --run "$run"
"$dump" "$store" --verify --run "$run"
echo
echo "The store is $store."
if [ -x "$build/tools/ledger-web" ]; then
  echo "See it in a browser (then open the URL it prints):"
  echo "  AGENT_MODEL=$AGENT_MODEL AGENT_DATA=$AGENT_DATA \\"
  echo "    $build/tools/ledger-web $store --plugin $plugin"
fi
