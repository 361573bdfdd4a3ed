#!/bin/sh
# The research-and-approve agent given bad input: wrong flags, a bad answer,
# missing configuration, a model that misbehaves, tools asked to leave the
# sandbox.  Each gets a clear message or an error result, never a crash.
#   agent_errors.sh AGENT_DEMO AGENT_PLUGIN AGENT_CHECK BUILD/examples/agent
set -eu
demo=$1 plugin=$2 check=$3 agent_dir=$4
. "$(dirname "$0")/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# fails STATUS PATTERN CMD...: CMD exits with STATUS, saying PATTERN.
fails() {
  want=$1 pat=$2; shift 2
  set +e; "$@" >"$dir/o" 2>&1; got=$?; set -e
  if [ "$got" -ne "$want" ] || ! grep -q -- "$pat" "$dir/o"; then
    echo "FAIL: $* exited $got (expected $want) saying:"; cat "$dir/o"
    echo "(expected: $pat)"; exit 1
  fi
}
opts="--store $dir/x.db --plugin $plugin --data $agent_dir/data"
fails 2 "unknown option '--bogus'" "$demo" $opts --bogus 1
fails 2 "needs a value" "$demo" $opts --run
fails 2 "needs a number, not 'x'" "$demo" $opts --crash-after-steps x
fails 2 "needs a JSON object" "$demo" $opts --answer '[1]'
fails 2 "needs a JSON object" "$demo" $opts --answer '{"approved":'
fails 2 "needs some text" "$demo" $opts --question ''
fails 2 "goes with --answer" "$demo" $opts --token abc
fails 1 "no run 'research-1' to answer" "$demo" $opts --answer '{"approved": true}'
fails 1 "unknown\|scheme" "$demo" $opts --model 'bogus://x'
fails 1 "no-such-dir" "$demo" --store "$dir/x.db" --plugin "$plugin" --data "$dir/no-such-dir"
fails 1 "no such file" "$demo" --store "$dir/x.db" --plugin "$dir/none.so"
# The plugin without its configuration refuses to load, and says why.
fails 1 "set AGENT_MODEL" env -u AGENT_MODEL AGENT_DATA="$agent_dir/data" "$check" "$dir/x.db" "$plugin" r
fails 1 "set AGENT_DATA" env -u AGENT_DATA AGENT_MODEL=scripted://x "$check" "$dir/x.db" "$plugin" r
[ ! -e "$dir/x.db" ] || [ -z "$(ls "$dir"/x.db* 2>/dev/null | head -1)" ] || true

# An answer that is neither yes nor no is asked again; a no withholds the
# answer, with the human's comment.
c="$dir/no"; new_case "$c"
run_demo "$c"
grep -q "^run research-1: suspended" "$c/out" || { cat "$c/out"; exit 1; }
answer_with() { run_demo "$c" --answer "$1"; }
answer_with '{"approved": "yes"}'
grep -q "^run research-1: suspended" "$c/out" || { cat "$c/out"; exit 1; }
grep -q 'please answer again' "$c/out"
answer_with '{"approved": false, "comment": "use the 2027 rates"}'
grep -q '^run research-1: completed' "$c/out"
grep -q '"approved":false,"withheld":"Maintaining the fleet' "$c/out"
grep -q '"comment":"use the 2027 rates"' "$c/out"
# three answers that say nothing end it with an error result (exit 1)
c="$dir/never"; new_case "$c"
run_demo "$c"
for a in '{}' '{"approved": 1}' '{"approved": null}'; do answer_with "$a"; done
grep -q '"code":"InvalidInput"' "$c/out"
grep -q 'no approval' "$c/out"
set +e; run_demo "$c"; set -e
fails 1 "InvalidInput" "$demo" --store "$c/s.db" --model "scripted://$c/script.json" --data "$agent_dir/data" --plugin "$plugin"

# A question for a run that asks another is bad usage, and the run is left
# as it was; its own question, given again, continues it.
c="$dir/asked"; new_case "$c"
run_demo "$c"
grep -q "^run research-1: suspended" "$c/out" || { cat "$c/out"; exit 1; }
fails 2 "run research-1 asks another question" "$demo" --store "$c/s.db" \
  --model "scripted://$c/script.json" --data "$agent_dir/data" \
  --plugin "$plugin" --question 'How many vans?'
run_demo "$c" --question 'What will maintaining our delivery fleet cost over the next three years?'
grep -q "^run research-1: suspended" "$c/out" || { cat "$c/out"; exit 1; }

# Tools asked to leave the sandbox answer Forbidden to the model, which
# reads the errors and answers; a model that calls an unknown tool ends the
# research with InvalidModelAction.
c="$dir/escape"; mkdir -p "$c"
cat >"$c/script.json" <<'JSON'
{"responses": [
  {"tool_calls": [{"name": "read_file", "arguments": {"path": "../../../../etc/passwd"}}]},
  {"tool_calls": [{"name": "http_get", "arguments": {"url": "file:///etc/passwd"}}]},
  {"text": "I cannot read those files."}
]}
JSON
run_demo "$c"
grep -q "^run research-1: suspended" "$c/out" || { cat "$c/out"; exit 1; }
run_demo "$c" --answer '{"approved": true}'
grep -q '^answer: I cannot read those files.' "$c/out"
AGENT_MODEL="scripted://$c/script.json" AGENT_DATA="$agent_dir/data" \
  "$check" "$c/s.db" "$plugin" research-1 >"$c/check"
expect "$c" verify ok
expect "$c" "results read_file" 1
expect "$c" "results http_get" 1
expect "$c" tool_errors 2
# search_notes' pages are p1, p2, ...: a page_token that is no such page
# (one whose matches would start past the largest number, or not "pN")
# is an error the model reads, not a page of its own with a next_token.
c="$dir/pages"; mkdir -p "$c"
cat >"$c/script.json" <<'JSON'
{"responses": [
  {"tool_calls": [{"name": "search_notes", "arguments": {"query": "van", "page_token": "p9223372036854775807"}},
                  {"name": "search_notes", "arguments": {"query": "van", "page_token": "p4611686018427387904"}},
                  {"name": "search_notes", "arguments": {"query": "van", "page_token": "zz"}},
                  {"name": "search_notes", "arguments": {"query": "van", "page_token": "p2x"}}]},
  {"text": "Those pages do not exist."}
]}
JSON
run_demo "$c"
grep -q "^run research-1: suspended" "$c/out" || { cat "$c/out"; exit 1; }
AGENT_MODEL="scripted://$c/script.json" AGENT_DATA="$agent_dir/data" \
  "$check" "$c/s.db" "$plugin" research-1 >"$c/check"
expect "$c" "results search_notes" 4
expect "$c" tool_errors 4
c="$dir/rogue"; mkdir -p "$c"
cat >"$c/script.json" <<'JSON'
{"responses": [{"tool_calls": [{"name": "rm", "arguments": {"path": "/"}}]}]}
JSON
fails 1 "InvalidModelAction" "$demo" --store "$c/s.db" --model "scripted://$c/script.json" --data "$agent_dir/data" --plugin "$plugin"

# An MCP server with a tool whose inputSchema the validator refuses
# (unevaluatedProperties): refused, bad usage, naming the flag; with
# --mcp-unchecked it is mounted and the story goes on to the approval.
c="$dir/unchecked"; mkdir -p "$c"
fake="fake=stdio:python3 $(dirname "$0")/mcp_fake_server.py unevaluated $c"
fails 2 "tool strict.*--mcp-unchecked" "$demo" --store "$c/s.db" --data "$agent_dir/data" --plugin "$plugin" --mcp "$fake"
[ ! -e "$c/s.db" ] || { echo "FAIL: a refused server left a store"; exit 1; }
"$demo" --store "$c/s.db" --data "$agent_dir/data" --plugin "$plugin" \
  --mcp "$fake" --mcp-unchecked >"$c/out" 2>&1 || { cat "$c/out"; exit 1; }
grep -q "^run research-1: suspended" "$c/out" || { cat "$c/out"; exit 1; }
grep -q '"tools/list"' "$c/log" || { echo "FAIL: no tools/list"; exit 1; }
echo "ok: every bad input got a clear error"
