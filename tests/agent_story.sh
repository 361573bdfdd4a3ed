#!/bin/sh
# The README's first story, scripts/agent-demo.sh, run as it is: killed
# mid-run, finished by ledger-replay, approved, dumped.  Then its store is
# read back: the approved answer, a ledger that verifies, four model
# exchanges each served once, every tool run once.
#   agent_story.sh SOURCE_DIR BUILD_DIR AGENT_CHECK
set -eu
src=$1 build=$2 check=$3
demo=$build/examples/agent-demo plugin=$build/examples/agent-plugin.so
agent_dir=$build/examples/agent
. "$src/tests/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
AGENT_DEMO_DIR="$dir" "$src/scripts/agent-demo.sh" "$build" >"$dir/log" 2>&1 || {
  cat "$dir/log"; echo "FAIL: the story script failed"; exit 1; }
cat "$dir/log"
has() { grep -q -- "$1" "$dir/log" || { echo "FAIL: the story did not say: $1"; exit 1; }; }
has '^\*\*\* SIGKILL at step boundary 24 (commit)'
has 'the model has been asked 1 time(s) so far'
has 'the model was asked 1 time(s) before, 4 in all'
has '^run research-1: suspended'
has '^run research-1: completed (resumed)'
has "^answer: $expected_answer"
has 'scripted model requests served: 4'
has 'checked, 0 fault'
db=agent.db check_run "$dir"
# ledger-dump shows the run's token totals: the four recorded exchanges'
dump=$build/tools/ledger-dump
"$dump" "$dir/agent.db" --run research-1 >"$dir/tree" || {
  echo "FAIL: ledger-dump --run failed"; exit 1; }
grep -q '^  tokens   1681 in, 120 out, over 4 model call(s)$' "$dir/tree" || {
  cat "$dir/tree"; echo "FAIL: ledger-dump did not show the token totals"; exit 1; }
"$dump" "$dir/agent.db" --run research-1 --format json | python3 -c '
import json, sys
t = json.load(sys.stdin)["run"]["tokens"]
assert t == {"input": 1681, "output": 120, "model_calls": 4}, t
' || { echo "FAIL: ledger-dump --format json has wrong token totals"; exit 1; }
# the ledger-web command the story ends with opens its store, the agent's
# policies loaded (on a free port here)
cmd=$(sed -n '/^See it in a browser/{n;N;p;}' "$dir/log" | sed 's/\\$//' | tr -d '\n')
case $cmd in *ledger-web*) ;; *) echo "FAIL: no ledger-web command: $cmd"; exit 1 ;; esac
(eval "exec env $cmd --listen 127.0.0.1:0") >"$dir/web" 2>&1 &
web=$!
n=0
until grep -q '^ledger-web: serving .* on http' "$dir/web"; do
  n=$((n + 1))
  if [ $n -gt 200 ] || ! kill -0 $web 2>/dev/null; then
    cat "$dir/web"; kill $web 2>/dev/null; echo "FAIL: ledger-web did not start"; exit 1
  fi
  sleep 0.05
done
url=$(sed -n 's/^ledger-web: serving .* on \(http[^ ]*\).*/\1/p' "$dir/web")
python3 - "$url" <<'PY' || { kill $web; echo "FAIL: ledger-web on the story's store"; exit 1; }
import json, sys, urllib.request
get = lambda p: json.load(urllib.request.urlopen(sys.argv[1] + p, timeout=30))
run = get("/api/runs/research-1")["run"]
assert run["status"] == "completed" and run["tokens"]["model_calls"] == 4, run
assert "ask_human" in get("/api/session")["policies"]
PY
kill $web
wait $web || [ $? -eq 0 ]
echo "ok: the story ran, and its run holds; ledger-web opens it"
