#!/bin/sh
# The agent reading its files through the reference filesystem MCP server
# (scripts/agent-demo.sh --mcp), offline: the story completes with the
# same answer; the model's file reads are fs.read_text_file calls, each a
# tools/call to the server; a kill right after the read and a check
# replay send it no call again (a tap on the server's input counts them);
# ledger-replay --check with the demo's plugin needs the same --mcp (or
# the plugin mounting it, AGENT_MCP), and passes after the server changed
# the tool.
# Skipped (77) when tests/npm_setup.sh could not install the server; with
# PL_NPM_REQUIRED=1, where nothing may skip, failed.
#   agent_mcp.sh SOURCE_DIR BUILD_DIR AGENT_CHECK
set -eu
src=$1 build=$2 check=$3
demo=$build/examples/agent-demo plugin=$build/examples/agent-plugin.so
replay=$build/tools/ledger-replay dump=$build/tools/ledger-dump
agent_dir=$build/examples/agent
fs=$build/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
if [ ! -f "$fs" ] || ! command -v node >/dev/null; then
  echo "$fs is not installed (tests/npm_setup.sh could not fetch it):" \
       "$([ "${PL_NPM_REQUIRED:-}" = 1 ] && echo "failed (PL_NPM_REQUIRED=1: nothing may skip)" || echo skipped)"
  [ "${PL_NPM_REQUIRED:-}" = 1 ] && exit 1
  exit 77
fi
. "$src/tests/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. The story, as the README tells it.
AGENT_DEMO_DIR="$dir/story" "$src/scripts/agent-demo.sh" --mcp "$build" \
  >"$dir/story.log" 2>&1 || { cat "$dir/story.log"; fail "agent-demo.sh --mcp failed"; }
cat "$dir/story.log"
grep -q "^answer: $expected_answer" "$dir/story.log" || fail "no answer"
grep -q 'action_call   researcher       {"policy":"fs.read_text_file"' \
  "$dir/story.log" || fail "the run's tree shows no fs.read_text_file call"
grep -q 'side_effect   fs.read_text_file {"name":"mcp.tools"' "$dir/story.log" ||
  fail "the call records no tool list"

# 2. A crash right after the read, through a tap that logs what the
#    server is sent.
data=$(cd "$agent_dir/data" && pwd)
spec="fs=stdio:sh $src/tests/mcp_tap.sh $dir/c/tap.log node $fs $data"
new_case "$dir/c"
cp "$agent_dir/script-mcp.json" "$dir/c/script.json"
calls() { grep -c '"tools/call"' "$dir/c/tap.log" || true; }
new_case "$dir/c"
cp "$agent_dir/script-mcp.json" "$dir/c/script.json"
k=19 # (the read is answered near boundary 22)
while :; do # the first boundary after the read's result
  rm -f "$dir/c/s.db" "$dir/c/s.db-lock" "$dir/c/tap.log" "$dir/c/script.json.served"
  run_demo "$dir/c" --mcp "$spec" --crash-after-steps $k
  crashed "$dir/c" || fail "no crash at boundary $k"
  [ "$(calls)" -eq 0 ] || break
  k=$((k + 1))
  [ $k -lt 100 ] || fail "no read in 100 boundaries"
done
echo "killed at boundary $k, after the server answered the read"
finish_mcp() {
  for _ in 1 2 3; do
    run_demo "$dir/c" --mcp "$spec"
    grep -q '^run research-1: completed' "$dir/c/out" && return 0
    if grep -q '^run research-1: suspended' "$dir/c/out"; then
      run_demo "$dir/c" --mcp "$spec" --answer '{"approved": true}'
      grep -q '^run research-1: completed' "$dir/c/out" && return 0
    fi
  done
  cat "$dir/c/log"; fail "the run did not complete"
}
finish_mcp
AGENT_MODEL="scripted://$dir/c/script.json" AGENT_DATA="$agent_dir/data" \
  "$check" "$dir/c/s.db" "$plugin" research-1 >"$dir/c/check"
expect "$dir/c" status completed
expect "$dir/c" verify ok
expect "$dir/c" "calls fs.read_text_file" 1
expect "$dir/c" "results fs.read_text_file" 1
expect "$dir/c" "calls read_file" 0
expect "$dir/c" tool_errors 0
expect "$dir/c" answer "$expected_answer"
# the read recorded before the kill was served, never sent again; the
# server answered it at most twice (a kill between its answer and the
# record sends the read, readOnlyHint so idempotent, once more)
[ "$(calls)" -le 2 ] || fail "the server got $(calls) calls"
before=$(calls)

# 3. ledger-replay --check with the demo's plugin and the same --mcp: the
#    server is started, and sent no call; without the server the tools the
#    model was offered differ: a divergence.
export AGENT_MODEL="scripted://$dir/c/script.json" AGENT_DATA="$data"
"$replay" "$dir/c/s.db" --plugin "$plugin" --mcp "$spec" --check \
  >"$dir/check.out" 2>>"$dir/c/log" || { cat "$dir/check.out"; fail "the check failed"; }
grep -q '^check research-1 (completed): ok' "$dir/check.out" || fail "no ok"
[ "$(calls)" -eq "$before" ] || fail "the check replay sent a call"
[ "$(grep -c '"initialize"' "$dir/c/tap.log")" -ge 3 ] || fail "no handshake?"
rc=0
"$replay" "$dir/c/s.db" --plugin "$plugin" --check >"$dir/check2.out" \
  2>&1 || rc=$?
[ $rc -eq 5 ] && grep -q 'diverged' "$dir/check2.out" ||
  { cat "$dir/check2.out"; fail "a check without the server should diverge (rc $rc)"; }
# a spec that cannot start is a clear error before the store is touched
rc=0
"$replay" "$dir/c/s.db" --plugin "$plugin" --mcp "fs=stdio:/nonexistent/x" \
  --check >"$dir/check3.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q 'cannot register the MCP server "fs"' "$dir/check3.out" ||
  { cat "$dir/check3.out"; fail "a bad --mcp spec: rc $rc"; }

# ... and with the plugin mounting the server itself (AGENT_MCP), no --mcp
AGENT_MCP="$spec" AGENT_MCP_LOG="$dir/c/plugin-mcp.log" "$replay" "$dir/c/s.db" \
  --plugin "$plugin" --check >"$dir/check7.out" 2>>"$dir/c/log" ||
  { cat "$dir/check7.out"; fail "the check with the plugin's own server failed"; }
grep -q '^check research-1 (completed): ok' "$dir/check7.out" || fail "no ok (AGENT_MCP)"
[ "$(calls)" -eq "$before" ] || fail "the check replay sent a call (AGENT_MCP)"
grep -q 'Secure MCP Filesystem Server' "$dir/c/plugin-mcp.log" ||
  fail "the plugin's server did not log to AGENT_MCP_LOG"
rc=0
AGENT_MCP="fs" "$replay" "$dir/c/s.db" --plugin "$plugin" --check \
  >"$dir/check8.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q 'AGENT_MCP is NAME=SPEC' "$dir/check8.out" ||
  { cat "$dir/check8.out"; fail "a bad AGENT_MCP: rc $rc"; }

# 4. The server changes the tool the run read with (what the model is
#    shown of it): the finished run still checks ok, served from its
#    ledger, and the server is sent no call.
mkdir "$dir/alt"
alt="fs=stdio:python3 $src/tests/mcp_alter.py $dir/alt node $fs $data"
echo "read_text_file description" >"$dir/alt/altered"
"$replay" "$dir/c/s.db" --plugin "$plugin" --mcp "$alt" --check \
  >"$dir/check4.out" 2>>"$dir/c/log" || { cat "$dir/check4.out"; fail "the check failed"; }
grep -q '^check research-1 (completed): ok' "$dir/check4.out" ||
  { cat "$dir/check4.out"; fail "no ok after the server changed"; }
grep -q '"tools/list"' "$dir/alt/log" || fail "the altered server was not asked"
[ "$(grep -c '"tools/call"' "$dir/alt/log")" -eq 0 ] || fail "a check sent a call"
echo "ok: the agent read its files through the MCP server, durably"
