#!/bin/sh
# The reminder example: two periods pass without an approval (two reminders
# are sent), then the approval ends the wait; run again, the finished run
# is replayed and no reminder is sent again.
set -eu
prog=$1
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
