#!/bin/sh
# The research-and-approve agent's timed approval (agent-demo
# --approval-timeout): the run waits, parked in the store, for an
# "approval" event up to the timeout, else escalates.  Offline, both paths:
# approved in time (and an answer sent after the time, before the run was
# woken, still wins), and timed out: the escalation is a recorded call,
# made once, shown by the demo and by ledger-dump; an answer after it is
# refused.
#   agent_approval.sh AGENT_DEMO AGENT_PLUGIN AGENT_CHECK BUILD/examples/agent
#                     LEDGER_REPLAY LEDGER_DUMP
set -eu
demo=$1 plugin=$2 check=$3 agent_dir=$4 replay=$5 dump=$6
. "$(dirname "$0")/agent_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() { echo "FAIL: $1"; cat "${2:-/dev/null}"; exit 1; }
has() { grep -q -- "$2" "$1" || fail "no '$2' in $1:" "$1"; }
hasnt() { ! grep -q -- "$2" "$1" || fail "'$2' in $1:" "$1"; }
count() { grep -c -- "$2" "$1" || true; }
checked() { # DIR KEY VALUE: agent-check says so
  AGENT_MODEL="scripted://$1/script.json" AGENT_DATA="$agent_dir/data" \
    "$check" "$1/s.db" "$plugin" research-1 >"$1/check"
  expect "$1" "$2" "$3"
}
dumped() { "$dump" "$1/s.db" --run research-1 >"$1/dump" 2>&1 || fail "ledger-dump" "$1/dump"; }

# Bad input: a clear refusal, nothing started.
run_demo "$dir" --approval-timeout x
has "$dir/out" "needs a number of milliseconds, 0 to 1e12, not 'x'"
run_demo "$dir" --approval-timeout -5
has "$dir/out" "needs a number of milliseconds"
run_demo "$dir" --approval-timeout 1000000000001 # past the agent's bound
has "$dir/out" "needs a number of milliseconds, 0 to 1e12"
[ ! -e "$dir/s.db" ] || fail "a refused start made a store"

# 1. Approved in time.
c="$dir/in-time"; new_case "$c"
run_demo "$c" --approval-timeout 3600000
has "$c/out" '^run research-1: waiting'
has "$c/out" '^waiting for approval: escalates in [0-9]* ms unless approved'
has "$c/out" '^notify_approver: the approver about'
# run again before the time: it waits on, and tells no one again
run_demo "$c"
has "$c/out" '^run research-1: waiting'
hasnt "$c/out" '^notify_approver'
# the timeout is the run's, as its question: another is bad usage, not
# ignored; the same one goes on
run_demo "$c" --approval-timeout 5
has "$c/out" '^agent-demo: run research-1 waits up to 3600000 ms for its approval, not 5; give another --run for this one$'
hasnt "$c/out" '^run research-1'
[ "$(cat "$c/rc")" -eq 2 ] || fail "another timeout exited $(cat "$c/rc")" "$c/out"
run_demo "$c" --approval-timeout 3600000
has "$c/out" '^run research-1: waiting'
run_demo "$c" --answer '{"approved": true}'
has "$c/out" '^run research-1: completed'
has "$c/out" "^answer: $expected_answer"
hasnt "$c/out" 'escalat'
checked "$c" status completed
expect "$c" verify ok
expect "$c" answer "$expected_answer"
dumped "$c"
has "$c/dump" 'notify_approver'
has "$c/dump" 'approval'
hasnt "$c/dump" 'escalate'
[ "$(count "$c/log" '^notify_approver')" -eq 1 ] || fail "the approver was told twice" "$c/log"
# an event for a run that has ended is refused, and nothing is stored
rc=0
"$replay" "$c/s.db" --signal research-1 --name approval --payload '{"approved": false}' >"$c/out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "a signal to an ended run exited $rc" "$c/out"
has "$c/out" 'ended\|completed'

# 1b. A run started with no timeout waits for its approval untimed: a
# timeout given later is refused, not ignored.
c="$dir/untimed"; new_case "$c"
run_demo "$c"
has "$c/out" '^run research-1: suspended'
run_demo "$c" --approval-timeout 300
has "$c/out" '^agent-demo: run research-1 waits for its approval untimed, not up to 300 ms; give another --run for this one$'
[ "$(cat "$c/rc")" -eq 2 ] || fail "a timeout for an untimed run exited $(cat "$c/rc")" "$c/out"

# 2. An answer sent after the time, before anyone woke the run: the event
# is there when the wait looks, and wins over the timeout.  The timeout
# is long enough for the run to park first even on a loaded machine (else
# it is due before the wait, and the run escalates at once).
c="$dir/late-answer"; new_case "$c"
run_demo "$c" --approval-timeout 1000
has "$c/out" '^run research-1: waiting'
sleep 1.1
run_demo "$c" --answer '{"approved": true}'
has "$c/out" '^run research-1: completed'
has "$c/out" "^answer: $expected_answer"
hasnt "$c/out" 'escalat'

# 3. Timed out: the worker's wake (ledger-replay --wake) escalates it.
c="$dir/timeout"; new_case "$c"
run_demo "$c" --approval-timeout 200
has "$c/out" '^run research-1: waiting'
i=0
until grep -q '^escalate: ' "$c/log"; do
  i=$((i + 1)); [ $i -le 100 ] || fail "the run never escalated" "$c/log"
  sleep 0.1
  AGENT_MODEL="scripted://$c/script.json" AGENT_DATA="$agent_dir/data" AGENT_ALLOW= \
    "$replay" "$c/s.db" --plugin "$plugin" --wake >"$c/out" 2>&1 || fail "--wake" "$c/out"
  cat "$c/out" >>"$c/log"
done
has "$c/log" "^escalate: the approver's manager about"
# the finished run replayed: escalated, nothing sent again
run_demo "$c"
has "$c/out" '^run research-1: completed'
has "$c/out" '^escalated: no approval came in time'
has "$c/out" '"escalated":true'
hasnt "$c/out" '^answer: '
[ "$(count "$c/log" '^escalate: ')" -eq 1 ] || fail "escalated more than once" "$c/log"
[ "$(count "$c/log" '^notify_approver: ')" -eq 1 ] || fail "the approver was told twice" "$c/log"
checked "$c" status completed
expect "$c" verify ok
dumped "$c"
has "$c/dump" 'escalate'
has "$c/dump" 'notify_approver'
# too late: the answer is refused, the outcome stays
run_demo "$c" --answer '{"approved": true}'
has "$c/out" 'is completed, not waiting for an answer'
"$dump" "$c/s.db" --run research-1 >"$c/dump2" 2>&1
cmp -s "$c/dump" "$c/dump2" || fail "a refused answer changed the ledger" "$c/dump2"
echo "ok: approved in time, answered late before the wake, timed out and escalated once"
