#!/bin/sh
# pg_run.sh -- run a command against a throwaway PostgreSQL server.
#   sh tests/pg_run.sh COMMAND [ARG...]
# initdb's a cluster in a new temporary directory (or copies the one
# PL_PG_TEMPLATE names, below), starts it listening on a
# Unix socket in that directory only (no TCP), runs COMMAND with
# PL_TEST_PG_URI set to a postgresql:// URI for it (and PL_TEST_PG_RESTART
# to a command that restarts it, PL_TEST_PG_STOP to one that stops it, as
# a crash would: PL_TEST_PG_RESTART starts it again), then stops the server
# and removes the directory.  The server refuses to run as root, so as root
# it runs as the `postgres` user the Debian package creates.  PL_PG_FSYNC
# (on or off, default off) is the server's fsync setting.  Missing server
# binaries fail (scripts/deps.sh --test installs them).
# PL_TEST_TIMEOUT (seconds; the suite sets it to the test's timeout): a
# command still running 20 s before it is stopped and the server's view of
# it is printed first (every session: what it runs and what it waits for;
# the locks not granted), so a hang in CI says where it hangs.
set -eu

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ] || [ ! -x "$bindir/pg_ctl" ]; then
  echo "pg_run: no PostgreSQL server under /usr/lib/postgresql/*/bin;" \
       "install it with scripts/deps.sh --test (package postgresql)" >&2
  exit 1
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/pl-pg.XXXXXX")
as=""
user=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || {
    echo "pg_run: running as root, and there is no postgres user" \
         "to run the server as" >&2
    rm -rf "$dir"; exit 1; }
  chown postgres: "$dir"
  as="runuser -u postgres --"
  user=postgres
fi

started=0
finish() {
  rc=$?
  if [ "$started" = 1 ]; then
    $as "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  if [ "$rc" -ne 0 ] && [ -f "$dir/log" ]; then
    echo "pg_run: server log:" >&2; tail -n 30 "$dir/log" >&2
  fi
  rm -rf "$dir"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

initdb_args="-A trust -U $user --no-sync -E UTF8 --locale=C"
# PL_PG_TEMPLATE (the suite sets it to a path in its build tree): the
# cluster is a copy of one initdb made there once (a second of CPU, the copy
# a tenth), never started; the first to make it keeps it (rename(2)), and
# its name says which server and options made it.
tpl=
if [ -n "${PL_PG_TEMPLATE:-}" ]; then
  tpl=$PL_PG_TEMPLATE-$(echo "$bindir $initdb_args" | cksum | cut -d' ' -f1)
fi
if [ -n "$tpl" ] && [ -d "$tpl" ]; then
  cp -a "$tpl" "$dir/data"
else
  # shellcheck disable=SC2086 # the arguments split as written
  $as "$bindir/initdb" -D "$dir/data" $initdb_args >"$dir/initdb.log" 2>&1 || {
    echo "pg_run: initdb failed:" >&2; cat "$dir/initdb.log" >&2; exit 1; }
  if [ -n "$tpl" ]; then
    { cp -a "$dir/data" "$tpl.$$" && mv -T "$tpl.$$" "$tpl"; } 2>/dev/null ||
      rm -rf "$tpl.$$"
  fi
fi
started=1
# The tests kill clients and restart the server, never the machine: the
# server's writes reach the page cache either way, so they run without
# fsync (PL_PG_FSYNC=on keeps it, as scripts/bench-pg.sh does for figures).
fsync=${PL_PG_FSYNC:-off}
$as "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
    -o "-h '' -k $dir -c max_connections=200 -c fsync=$fsync" start >/dev/null || {
  echo "pg_run: the server did not start" >&2; exit 1; }

PL_TEST_PG_URI="postgresql:///postgres?host=$dir&user=$user"
# the command that restarts the server as a crash would (test_pg_restart.c)
PL_TEST_PG_RESTART="$as $bindir/pg_ctl -D $dir/data -l $dir/log -w -t 60 -m immediate restart"
PL_TEST_PG_STOP="$as $bindir/pg_ctl -D $dir/data -w -t 60 -m immediate stop"
export PL_TEST_PG_URI PL_TEST_PG_RESTART PL_TEST_PG_STOP
set +e
if [ -n "${PL_TEST_TIMEOUT:-}" ] && [ "$PL_TEST_TIMEOUT" -gt 40 ]; then
  exec 3<&0 # the command keeps this script's input, as in the foreground
  "$@" <&3 3<&- &
  cmd=$!
  # The watchdog sleeps once, and is woken when the command ends: no
  # polling (a process a second for the length of every test), and no
  # kill -0 of the command's pid, which on a busy machine another process
  # can have been given once the command is reaped (three PostgreSQL tests
  # of a few seconds each took 587 s so).  Its sleep writes nowhere, so one
  # left behind holds no test's output open.
  (
    sleep $((PL_TEST_TIMEOUT - 20)) >/dev/null 2>&1 &
    echo $! >"$dir/watchdog"
    wait
    rm -f "$dir/watchdog"
    [ -e "$dir/ended" ] && exit 0
    echo "pg_run: '$*' still runs after $((PL_TEST_TIMEOUT - 20)) s;" \
         "the server's sessions:" >&2
    timeout 20 $as "$bindir/psql" -X -q -h "$dir" -U "$user" -d postgres -c \
      "SELECT pid, state, wait_event_type, wait_event, backend_xid,
              now() - xact_start AS in_xact, left(query, 200) AS query
         FROM pg_stat_activity WHERE backend_type = 'client backend'
          AND pid <> pg_backend_pid() ORDER BY pid" \
      -c "SELECT pid, locktype, mode, relation::regclass, transactionid
            FROM pg_locks WHERE NOT granted" >&2 2>&1
  ) &
  dog=$!
  wait "$cmd"
  rc=$?
  : >"$dir/ended"
  # its sleep's pid, while that sleep is its unreaped child
  until kill "$(cat "$dir/watchdog" 2>/dev/null)" 2>/dev/null ||
        ! kill -0 "$dog" 2>/dev/null; do
    sleep 0.05 # not yet asleep, or printing the sessions
  done
  wait "$dog"
else
  "$@"
  rc=$?
fi
set -e
exit "$rc"
