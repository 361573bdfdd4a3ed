#!/bin/sh
# The same agent plugin against a model over the OpenAI chat completions
# protocol (tests/llm_server.py on loopback), killed at every step boundary
# in turn: the server sees each conversation turn once, except the one turn
# a kill cut off before its answer was recorded; no tool runs twice; the
# tool catalog it is sent names the agent's tools.
#   agent_openai.sh AGENT_DEMO AGENT_PLUGIN AGENT_CHECK BUILD/examples/agent LLM_SERVER LEDGER_REPLAY
set -eu
demo=$1 plugin=$2 check=$3 agent_dir=$4 server=$5 replay=$6
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

# check_turns CASE KILL: the server saw turns 0 1 2 3 in order, each once,
# but the one a kill cut off between its answer and its record (when
# repaid), which it saw twice.
check_turns() {
  r=$(repaid "$1")
  python3 - "$dir/log" "$r" <<'PY' || { echo "FAIL: kill $2"; cat "$1/log"; exit 1; }
import json, sys
turns = [json.loads(l)["turn"] for l in open(sys.argv[1])]
repaid = int(sys.argv[2])
seen = sorted(set(turns))
twice = [t for t in seen if turns.count(t) > 1]
ok = (turns == sorted(turns) and seen == [0, 1, 2, 3]
      and len(twice) == repaid and len(turns) == 4 + repaid)
if not ok:
    print("the server saw turns %s (a model call repaid: %d)" % (turns, repaid))
sys.exit(0 if ok else 1)
PY
}

# The crash matrix over the protocol: killed at each step boundary on the
# way to the approval, then at each while the approval is resumed; odd
# kills finished by ledger-replay, even ones by agent-demo.  Each case runs
# the agent and its tools to the same answer (check_ledger: every tool
# called once, every exchange recorded once).
repaid_kills=0
finish_case() {
  if [ $(($2 % 2)) -eq 1 ]; then finish_replay "$1"; else finish "$1"; fi
  check_ledger "$1"
  check_turns "$1" "$1"
  repaid_kills=$((repaid_kills + $(repaid "$1")))
  rm -rf "$1"
}
n=1 phase1=0
while :; do
  c="$dir/a$n"; mkdir -p "$c"; : >"$dir/log"
  run_demo "$c" --crash-after-steps "$n"
  if ! crashed "$c"; then rm -rf "$c"; break; fi
  finish_case "$c" "$n"
  n=$((n + 1)) phase1=$((phase1 + 1))
done
n=1 phase2=0
while :; do
  c="$dir/b$n"; mkdir -p "$c"; : >"$dir/log"
  run_demo "$c"
  answer "$c" --crash-after-steps "$n"
  if ! crashed "$c"; then rm -rf "$c"; break; fi
  finish_case "$c" "$n"
  n=$((n + 1)) phase2=$((phase2 + 1))
done
[ "$phase1" -ge 10 ] && [ "$phase2" -ge 2 ] && [ "$repaid_kills" -ge 1 ] || {
  echo "FAIL: too few boundaries ($phase1, $phase2, $repaid_kills repaid)"; exit 1; }
c="$dir/clean"; mkdir -p "$c"; : >"$dir/log"
run_demo "$c"
python3 - "$dir/log" <<'PY'
import json, sys
first = json.loads(open(sys.argv[1]).readline())
body = first["body"]
assert first["auth"] == "none", first["auth"]
assert body["model"] == "gpt-4o-mini", body["model"]
names = sorted(t["function"]["name"] for t in body["tools"])
assert names == ["ask_human", "calculator", "http_get", "read_file",
                 "search_notes"], names
assert body["messages"][0]["role"] == "system"
PY
echo "ok: over the OpenAI protocol, killed at each of $phase1 boundaries before the approval and $phase2 after it: every turn asked once but the one a kill cut off ($repaid_kills such kills)"
