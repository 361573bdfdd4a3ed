#!/bin/sh
# The same agent plugin against a model over the OpenAI chat completions
# protocol (tests/llm_server.py on loopback), killed mid-run: the server
# sees each conversation turn once, except the one turn a kill cut off
# before its answer was recorded; the tool catalog it is sent names the
# agent's tools.
#   agent_openai.sh AGENT_DEMO AGENT_PLUGIN AGENT_CHECK BUILD/examples/agent LLM_SERVER
set -eu
demo=$1 plugin=$2 check=$3 agent_dir=$4 server=$5
. "$(dirname "$0")/agent_lib.sh"
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
data=$(cd "$agent_dir/data" && pwd)
unset OPENAI_API_KEY || true

# The shipped script's four answers, in the protocol's words; "by_turn":
# a request is answered by how many assistant turns it carries, as a model
# asked the same conversation again would answer.
python3 - "$agent_dir/script.json" "$dir/server.json" <<'PY'
import json, sys
src = json.load(open(sys.argv[1]))
out = []
for r in src["responses"]:
    msg = {"role": "assistant", "content": r.get("text")}
    calls = [{"id": c["id"], "type": "function",
              "function": {"name": c["name"],
                           "arguments": json.dumps(c["arguments"])}}
             for c in r.get("tool_calls", [])]
    if calls:
        msg["tool_calls"] = calls
    out.append({"body": {"choices": [{"message": msg}],
                         "usage": {"prompt_tokens": r["usage"]["input"],
                                   "completion_tokens": r["usage"]["output"]}}})
json.dump({"by_turn": True, "responses": out}, open(sys.argv[2], "w"))
PY
python3 "$server" --script "$dir/server.json" --log "$dir/log" \
  --port-file "$dir/port" &
pid=$!
i=0
while [ ! -s "$dir/port" ]; do
  i=$((i + 1)); [ $i -gt 200 ] && { echo "the server did not start"; exit 1; }
  sleep 0.05
done
model="openai+http://127.0.0.1:$(cat "$dir/port")/v1#gpt-4o-mini"

# turns LOG: the assistant turns of the requests logged, one line each.
turns() { python3 -c 'import json,sys; [print(json.loads(l)["turn"]) for l in open(sys.argv[1])]' "$1"; }

for n in 8 9; do
  c="$dir/k$n"; mkdir -p "$c"; : >"$dir/log"
  run_demo "$c" --crash-after-steps "$n"
  crashed "$c"
  finish "$c"
  check_ledger "$c"
  expect "$c" exchanges 4
  # kill 8 struck after turn 0's answer was durable: each turn asked once;
  # kill 9 struck between turn 1's answer and its record: turn 1 twice.
  want="0 1 2 3"; [ "$n" -eq 9 ] && want="0 1 1 2 3"
  got=$(turns "$dir/log" | tr '\n' ' ' | sed 's/ $//')
  if [ "$got" != "$want" ]; then
    echo "FAIL: kill at $n: the server saw turns '$got', expected '$want'"; cat "$c/log"; exit 1
  fi
done
python3 - "$dir/log" <<'PY'
import json, sys
first = json.loads(open(sys.argv[1]).readline())
body = first["body"]
assert first["auth"] == "none", first["auth"]
assert body["model"] == "gpt-4o-mini", body["model"]
names = sorted(t["function"]["name"] for t in body["tools"])
assert names == ["ask_human", "calculator", "http_get", "read_file"], names
assert body["messages"][0]["role"] == "system"
PY
echo "ok: over the OpenAI protocol, every turn asked once but the one a kill cut off"
