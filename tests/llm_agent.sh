#!/bin/sh
# The README's LLM agent, offline: the first run asks the scripted model
# twice and adds once; the second replays the run and asks nothing.
set -eu
agent=$1 script=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$script" "$dir/agent.json"
first=$("$agent" "$dir/a.db" "scripted://$dir/agent.json" "What is 19 + 23?")
second=$("$agent" "$dir/a.db" "scripted://$dir/agent.json" "What is 19 + 23?")
echo "$first"; echo "$second"
echo "$first" | grep -q '{"text":"19 + 23 = 42.","tokens":80,"tokens_in":113,"tokens_out":21}'
echo "$first" | grep -q '2 model calls, 113 input and 21 output tokens'
[ "$second" = "$first" ]
[ "$(wc -l < "$dir/agent.json.served")" -eq 2 ]
