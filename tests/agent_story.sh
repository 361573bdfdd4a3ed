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

# A story that goes wrong says where and why: a build whose scripted model
# has only its first answer (the programs are the real ones) leaves
# ledger-replay an error for the run's result at step 2; the script stops
# there, exit 1, saying so on stderr, never silently or with the reason
# lost in a log.
short=$dir/short
mkdir -p "$short/examples/agent" "$short/tools"
for f in examples/agent-demo examples/agent-plugin.so tools/ledger-replay tools/ledger-dump; do
  ln -s "$build/$f" "$short/$f"
done
ln -s "$agent_dir/data" "$short/examples/agent/data"
python3 - "$agent_dir/script.json" "$short/examples/agent/script.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["responses"] = s["responses"][:1]
json.dump(s, open(sys.argv[2], "w"))
PY
rc=0
AGENT_DEMO_DIR="$dir/short-story" "$src/scripts/agent-demo.sh" "$short" \
  >"$dir/short.out" 2>"$dir/short.err" || rc=$?
cat "$dir/short.out" "$dir/short.err"
[ "$rc" -eq 1 ] &&
  grep -q '^agent-demo.sh: ledger-replay did not bring the run to its approval (exit status 0): the story stops here$' "$dir/short.err" &&
  ! grep -q '^== 3' "$dir/short.out" || {
  echo "FAIL: a story gone wrong exited $rc without saying where"; exit 1; }
echo "ok: the story ran, and its run holds; ledger-web opens it; one gone wrong says so"
