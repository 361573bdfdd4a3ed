#!/bin/sh
# The LLM agent under valgrind: against the scripted model (a run, then its
# replay) and against the loopback server over libcurl.  Any leak or memory
# error fails.
set -eu
valgrind=$1 agent=$2 script=$3 server=$4
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
vg="$valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible"
cp "$script" "$dir/agent.json"
$vg "$agent" "$dir/s.db" "scripted://$dir/agent.json" "What is 19 + 23?" >/dev/null
$vg "$agent" "$dir/s.db" "scripted://$dir/agent.json" "What is 19 + 23?" >/dev/null
cat > "$dir/server.json" <<'JSON'
{"responses": [
 {"body": {"choices": [{"message": {"role": "assistant", "content": null,
   "tool_calls": [{"id": "c1", "type": "function", "function":
   {"name": "add", "arguments": "{\"a\": 19, \"b\": 23}"}}]}}]}},
 {"body": {"choices": [{"message": {"role": "assistant",
   "content": "42"}}], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}}
]}
JSON
python3 "$server" --script "$dir/server.json" --log "$dir/log" \
  --port-file "$dir/port" &
pid=$!
i=0
while [ ! -s "$dir/port" ]; do
  i=$((i + 1)); [ $i -gt 200 ] && { echo "the server did not start"; exit 1; }
  sleep 0.05
done
out=$($vg "$agent" "$dir/h.db" "openai+http://127.0.0.1:$(cat "$dir/port")/v1#m" "What is 19 + 23?")
echo "$out"
echo "$out" | grep -q '{"text":"42","tokens":10,"tokens_in":9,"tokens_out":1}'
echo "ok: no leaks, no memory errors"
