#!/usr/bin/env bash
# The durable research-and-approve agent, offline: a model (the scripted
# model shipped in examples/agent/script.json) researches a question with
# read_file, http_get and calculator, then waits for a human to approve.
# The process is killed mid-run; ledger-replay finishes it without asking
# the model again for anything it had answered; a human approves; the
# answer prints; ledger-dump shows the run's tree.
#
#   scripts/agent-demo.sh [--stream] [--mcp] [BUILD_DIR]
#                         (default build; build it first, or run
#                         scripts/demo.sh)
# --stream prints the model's answers as they are written (the scripted
# model writes a word at a time); turns served from the ledger come whole.
# --mcp reads the files through the reference filesystem MCP server
# (@modelcontextprotocol/server-filesystem, over stdio; installed from npm
# into BUILD_DIR/npm when missing) instead of the built-in read_file.
# AGENT_DEMO_DIR names the directory for the store (default: a new one).
set -euo pipefail
cd "$(dirname "$0")/.."
# Exit status: 0 the story ran; 1 a step of it failed; 2 bad usage or no
# build.
usage() { echo "agent-demo.sh: $1 (usage: scripts/agent-demo.sh [--stream] [--mcp] [BUILD_DIR])" >&2; exit 2; }
stream='' mcp='' build=''
while [ $# -gt 0 ]; do
  case $1 in
    --stream) stream=1 ;;
    --mcp) mcp=1
      # the script mounts the one server it knows; agent-demo itself
      # takes --mcp NAME=SPEC
      case ${2-} in *=*) usage "--mcp takes no value here, not '$2' (agent-demo takes --mcp NAME=SPEC)" ;; esac ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" 2>/dev/null ||
        { echo "agent-demo.sh: cannot write the help" >&2; exit 1; }
      exit 0 ;;
    -*) usage "unknown option '$1'" ;;
    *) [ -z "$build" ] || usage "one BUILD_DIR, not '$build' and '$1'"
       build=$1 ;;
  esac
  shift
done
build=${build:-build}
[ -d "$build" ] || usage "no build directory '$build': build first (scripts/demo.sh)"
demo=$build/examples/agent-demo plugin=$build/examples/agent-plugin.so
replay=$build/tools/ledger-replay dump=$build/tools/ledger-dump
for f in "$demo" "$plugin" "$replay" "$dump"; do
  [ -e "$f" ] || { echo "agent-demo.sh: $f is missing: build first (scripts/demo.sh)" >&2; exit 2; }
done
dir=${AGENT_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/policyledger-agent.XXXXXX")}
if ! { mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ]; }; then
  echo "agent-demo.sh: cannot write the store's directory '$dir' (AGENT_DEMO_DIR)" >&2; exit 1
fi
store="$dir/agent.db" run=research-1
rm -f "$store" "$store-lock" "$dir/script.json.served" # a story afresh
script=script.json
[ -z "$mcp" ] || script=script-mcp.json # its model reads with fs.read_text_file
if [ -n "$stream" ]; then # the scripted model writes at a reader's pace
  sed 's/^{"responses": \[/{"stream_delay_ms": 25, "responses": [/' \
    "$build/examples/agent/$script" >"$dir/script.json"
  export AGENT_STREAM=1
else
  cp "$build/examples/agent/$script" "$dir/script.json"
fi
# The plugin's configuration, for agent-demo and ledger-replay alike.
export AGENT_MODEL="scripted://$dir/script.json"
AGENT_DATA="$(cd "$build/examples/agent/data" && pwd)"
export AGENT_DATA
# --mcp: the filesystem MCP server, rooted at the data, for every program
# that runs the agent (the same server each time).
mcp_args=()
if [ -n "$mcp" ]; then
  fs=$build/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
  [ -f "$fs" ] || sh tests/npm_setup.sh "$build/npm" "the agent over MCP" \
    @modelcontextprotocol/server-filesystem >&2
  [ -f "$fs" ] || { echo "agent-demo.sh: --mcp needs node and npm (scripts/deps.sh --test)" >&2; exit 2; }
  mcp_args=(--mcp "fs=stdio:node $(cd "$(dirname "$fs")" && pwd)/index.js $AGENT_DATA")
  echo "(the files are read through the MCP server: ${mcp_args[1]})"
  echo
fi
# replay_step STATUS WHAT ARGS...: ledger-replay on the run's store.  Its
# standard error, where an --mcp server's chatter goes too, is kept in
# STORE.mcp.log; when it exits other than STATUS it did not do WHAT: that
# is shown, and the story stops.
replay_step() {
  want=$1 what=$2 rc=0; shift 2
  "$replay" "$store" --plugin "$plugin" "${mcp_args[@]}" "$@" 2>"$dir/replay.err" || rc=$?
  cat "$dir/replay.err" >>"$store.mcp.log"
  [ "$rc" -ne "$want" ] || return 0
  cat "$dir/replay.err" >&2
  echo "agent-demo.sh: ledger-replay did not $what (exit status $rc): the story stops here" >&2
  exit 1
}
served() { if [ -f "$dir/script.json.served" ]; then wc -l <"$dir/script.json.served" | tr -d ' '; else echo 0; fi; }

echo "== 1. The agent researches.  Kill it (SIGKILL) at step boundary 24: its"
echo "==    first model call and its first tool calls are durable: search_notes"
echo "==    (two pages, each a recorded call) and ${mcp:+fs.}read${mcp:+_text}_file."
# (the braces keep the shell's own "Killed" notice off the screen)
# (a status other than SIGKILL's is a failure of its own: said, and the
# story stops there)
killed=0
{ "$demo" --store "$store" --run "$run" --model "$AGENT_MODEL" \
    --data "$AGENT_DATA" "${mcp_args[@]}" --crash-after-steps 24 2>&1; } 2>/dev/null ||
  killed=$?
[ "$killed" -eq 137 ] || {
  echo "agent-demo.sh: agent-demo did not die at the step boundary (exit status $killed)" >&2; exit 1; }
echo "   (the process died: exit status $killed)"
before=$(served)
echo "   the model has been asked $before time(s) so far"
echo
echo "== 2. ledger-replay finishes the run from its ledger, up to the approval."
replay_step 4 "bring the run to its approval" --run "$run"
after=$(served)
echo "   the model was asked $before time(s) before, $after in all: only the"
echo "   $((after - before)) call(s) not yet made were made; none was repeated"
echo
echo "== 3. A human approves the answer."
replay_step 0 "complete the approved run" --resume "$run" \
  --answer '{"approved": true}'
echo
echo "== 4. The answer (agent-demo replays the finished run: nothing is asked again)."
"$demo" --store "$store" --run "$run" --model "$AGENT_MODEL" --data "$AGENT_DATA" \
  "${mcp_args[@]}"
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
