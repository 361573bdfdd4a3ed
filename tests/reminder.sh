#!/bin/sh
# The reminder example: two periods pass without an approval (two reminders
# are sent), then the approval ends the wait; run again, the finished run
# is replayed and no reminder is sent again.
#   reminder.sh REMINDER LEDGER_DUMP
set -eu
prog=$1 dump=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
first=$("$prog" "$dir/r.db" 50)
second=$("$prog" "$dir/r.db" 50)
echo "$first"; echo "$second"
echo "$first" | grep -q '^run approval-1: waiting$'
test "$(echo "$first" | grep -c '^reminder sent to alice@example.com$')" = 2
echo "$first" | grep -q 'completed {"answer":{"by":"bob"},"reminders":2} (reminders sent by this process: 2)'
echo "$second" | grep -q 'completed {"answer":{"by":"bob"},"reminders":2} (reminders sent by this process: 0)'
! echo "$second" | grep -q 'reminder sent'

# A run that gave up (every period passed before the approver looked,
# which a period of 1 ms mostly does) is no approval: exit 1, said on
# stderr; an approved one exits 0.  Tried until one gives up.
gave_up=0
for i in 1 2 3 4 5 6 7 8 9 10; do
  rc=0
  "$prog" "$dir/g$i.db" 1 >"$dir/out" 2>"$dir/err" || rc=$?
  if grep -q '"gave_up":true' "$dir/out"; then
    [ "$rc" -eq 1 ] && grep -q 'gave up' "$dir/err" || {
      echo "FAIL: a run that gave up exited $rc"; cat "$dir/out" "$dir/err"; exit 1; }
    gave_up=1
    break
  fi
  [ "$rc" -eq 0 ] && grep -q '"answer":{"by":"bob"}' "$dir/out" || {
    echo "FAIL: exited $rc"; cat "$dir/out" "$dir/err"; exit 1; }
done
[ "$gave_up" -eq 1 ] || echo "(no run gave up in 10 tries: not checked)"

# killed_at STORE PERIOD_MS STEP: run the program, and kill it (SIGKILL) once
# its run's root ledger holds STEP (as ledger-dump prints it).  Fails (1)
# if the program ended first, as a loaded host's ledger-dump may see STEP
# late; the caller tries again with a longer period and a new store.
killed_at() {
  "$prog" "$1" "$2" >"$dir/out" 2>&1 &
  pid=$! i=0
  until "$dump" "$1" --run approval-1 2>/dev/null | grep -q "^  0:[0-9]* *$3"; do
    i=$((i + 1)); [ $i -le 300 ] || { echo "FAIL: no $3"; kill -9 $pid; exit 1; }
    sleep 0.05
  done
  kill -9 $pid 2>/dev/null || true
  rc=0
  wait $pid || rc=$?
  [ "$rc" -ne 137 ] || return 0
  echo "(the program ended, exit $rc, before the kill; its output:)"
  cat "$dir/out"
  [ "$rc" -eq 0 ] && grep -q 'completed' "$dir/out" || {
    echo "FAIL: the program to kill exited $rc"; exit 1; }
  return 1
}

# Killed (SIGKILL) once its first reminder is durable, then run again: the
# run goes on from its ledger, the approver answers after the run's second
# reminder (not this process's second), and the run is approved.
period=2000 store=$dir/c.db
killed_at "$store" $period 'action_result send_reminder' || {
  period=8000 store=$dir/c2.db
  killed_at "$store" $period 'action_result send_reminder'; } ||
  { echo "FAIL: never killed before the run ended"; exit 1; }
rc=0
"$prog" "$store" $period >"$dir/out" 2>&1 || rc=$?
cat "$dir/out"
[ "$rc" -eq 0 ] && grep -q 'completed {"answer":{"by":"bob"},"reminders":2}' "$dir/out" || {
  echo "FAIL: the continued run exited $rc, not approved"; exit 1; }

# PERIOD_MS is the run's: another for a run that exists is bad usage (exit
# 2, one line), not ignored; none continues the run with its own.  The
# period is long enough that the kill comes before its second reminder
# (a loaded host's ledger-dump takes a while to see the wait): after
# that, the run continued sends its third at once and gives up.
period=2000 store=$dir/p.db
killed_at "$store" $period 'wait' || {
  period=8000 store=$dir/p2.db; killed_at "$store" $period 'wait'; } ||
  { echo "FAIL: never killed before the run ended"; exit 1; }
rc=0
"$prog" "$store" 50 >"$dir/out" 2>"$dir/err" || rc=$?
cat "$dir/out" "$dir/err"
[ "$rc" -eq 2 ] && [ ! -s "$dir/out" ] && [ "$(wc -l <"$dir/err")" -eq 1 ] &&
  grep -q "run approval-1 waits with a period of $period ms, not 50" "$dir/err" || {
  echo "FAIL: another PERIOD_MS for the run exited $rc"; exit 1; }
rc=0
"$prog" "$store" >"$dir/out" 2>&1 || rc=$?
cat "$dir/out"
[ "$rc" -eq 0 ] && grep -q 'completed {"answer":{"by":"bob"},"reminders":2}' "$dir/out" || {
  echo "FAIL: the run continued with its own period exited $rc"; exit 1; }
