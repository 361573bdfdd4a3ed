#!/usr/bin/env python3
"""Schedules from a shell: ledger-replay --schedule-put / --schedule-delete
and ledger-dump --schedules, the real executables of one build tree on LMDB
stores this script makes.  Refused input creates and writes nothing.
Standard library only.  Exits 1 if any case fails.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ARGS = None


class Failure(Exception):
    pass


def check(cond, what, *context):
    if not cond:
        raise Failure(what + "".join("\n  " + str(c) for c in context))


def run(argv, expect):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    for mark in ("Sanitizer", "runtime error:"):
        check(mark not in p.stderr, "sanitizer report", p.stderr)
    check(p.returncode == expect, "%s exited %d, expected %d"
          % (" ".join(argv[1:]), p.returncode, expect),
          "stdout: " + p.stdout, "stderr: " + p.stderr)
    return p


def put(store, name, *extra, expect=0):
    return run([ARGS.replay, store, "--schedule-put", name] + list(extra),
               expect)


def listed(store):
    p = run([ARGS.dump, store, "--schedules", "--format", "jsonl"], 0)
    return [json.loads(line) for line in p.stdout.splitlines()]


def case_put_list_replace_delete(d):
    store = os.path.join(d, "s.db")
    p = put(store, "nightly", "--cron", "30 2 * * 1-5", "--zone",
            "Europe/London", "--policy", "report", "--payload",
            '{"to":"ops"}', "--catch-up", "all:3")
    check(p.stdout.startswith("schedule nightly: next tick 20"), p.stdout)
    put(store, "hourly", "--cron", "@hourly", "--policy", "ping",
        "--payload", "{}", "--overlap", "allow")
    got = listed(store)
    check([s["name"] for s in got] == ["hourly", "nightly"], got)
    n = got[1]
    check(n["cron"] == "30 2 * * 1-5" and n["zone"] == "Europe/London"
          and n["policy"] == "report" and n["payload"] == {"to": "ops"}
          and n["overlap"] == "skip" and n["catch_up"] == "all"
          and n["catch_up_max"] == 3 and n["last_run"] is None, n)
    check(n["next_ms"] > n["created_ms"], n)
    check(got[0]["overlap"] == "allow" and got[0]["catch_up"] == "skip"
          and got[0]["zone"] == "UTC", got[0])
    text = run([ARGS.dump, store, "--schedules"], 0).stdout
    check("nightly" in text and "skip,all:3" in text and "(in " in text,
          text)
    # put again: replaced
    put(store, "nightly", "--cron", "0 3 * * *", "--policy", "report",
        "--payload", "{}")
    got = listed(store)
    check(got[1]["cron"] == "0 3 * * *" and got[1]["zone"] == "UTC", got)
    p = run([ARGS.replay, store, "--schedule-delete", "nightly"], 0)
    check("deleted schedule nightly" in p.stdout, p.stdout)
    check([s["name"] for s in listed(store)] == ["hourly"], listed(store))
    p = run([ARGS.replay, store, "--schedule-delete", "nightly"], 2)
    check("no schedule 'nightly'" in p.stderr, p.stderr)


def case_a_due_tick_no_worker_fired(d):
    """A tick missed with no worker to fire it: listed as due, how long
    ago it was, in the words docs/tools.md gives ("(... ago), due: ...")."""
    store = os.path.join(d, "s.db")
    run([ARGS.helper, "schedule", store, "late", "0 * * * *", "report",
         "7200"], 0)
    put(store, "soon", "--cron", "*/5 * * * *", "--policy", "ping",
        "--payload", "{}")
    lines = run([ARGS.dump, store, "--schedules"], 0).stdout.splitlines()
    late = next(l for l in lines if l.startswith("late "))
    check(re.search(r" \(\d+ min( \d+ s)? ago\), due: no worker has "
                    r"fired it$", late) or
          re.search(r" \(1 h( \d+ min)? ago\), due: no worker has fired "
                    r"it$", late), "the due tick", late)
    soon = next(l for l in lines if l.startswith("soon "))
    check(re.search(r" \(in (\d+ min( \d+ s)?|\d+ s|\d+ ms)\)$", soon),
          "the next tick", soon)


def case_refused_writes_nothing(d):
    store = os.path.join(d, "never.db")
    base = ["--policy", "p", "--payload", "{}"]
    bad = [
        (["--cron", "61 * * * *"] + base, "minute field: 61"),
        (["--cron", "* * *"] + base, "3 fields"),
        (["--cron", "0 0 30 2 *"] + base, "never fires"),
        (["--cron", "* * * * *", "--zone", "Nowhere/Land"] + base,
         "not found"),
        (["--cron", "* * * * *", "--zone", "../../etc/passwd"] + base,
         "not a tz database name"),
        (["--cron", "* * * * *", "--policy", "p", "--payload", "[1]"],
         "JSON object"),
        (["--cron", "* * * * *", "--catch-up", "all:0"] + base,
         "--catch-up"),
        (["--cron", "* * * * *", "--catch-up", "sometimes"] + base,
         "--catch-up"),
        (["--cron", "* * * * *", "--overlap", "maybe"] + base, "--overlap"),
        (["--cron", "* * * * *", "--payload", "{}"], "needs --cron"),
        (["--policy", "p", "--payload", "{}"], "needs --cron"),
    ]
    for args, words in bad:
        p = put(store, "x", *args, expect=1)
        check(words in p.stderr, "message lacks %r" % words, args, p.stderr)
    p = put(store, "bad name", "--cron", "* * * * *", *base, expect=1)
    check("bad schedule name" in p.stderr, p.stderr)
    p = run([ARGS.replay, store, "--cron", "* * * * *", "--run", "x",
             "--plugin", "none.so"], 1)
    check("go with --schedule-put" in p.stderr, p.stderr)
    p = run([ARGS.replay, store, "--schedule-delete", "x"], 2)
    check(not os.path.exists(store), "a refused command created the store")
    p = run([ARGS.dump, store, "--schedules", "--run", "x"], 1)
    check("--schedules" in p.stderr, p.stderr)


def case_run_options(d):
    """--priority, --key/--key-limit and --deadline: stored with the
    schedule, listed (text, json, jsonl) and echoed by --json; a schedule
    without them lists them empty."""
    store = os.path.join(d, "s.db")
    p = run([ARGS.replay, store, "--schedule-put", "export", "--cron",
             "0 2 * * *", "--policy", "export", "--payload", "{}",
             "--priority", "-5", "--key", "warehouse", "--key-limit", "1",
             "--deadline", "90m", "--json"], 0)
    doc = json.loads(p.stdout)
    s = doc["schedule"]
    check(s["priority"] == -5 and s["concurrency_key"] == "warehouse"
          and s["concurrency_limit"] == 1
          and s["deadline_in_ms"] == 90 * 60000, s)
    put(store, "plain", "--cron", "@hourly", "--policy", "ping",
        "--payload", "{}")
    got = listed(store)
    check(got[0] == dict(got[0], priority=-5, concurrency_key="warehouse",
                         concurrency_limit=1, deadline_in_ms=5400000), got)
    check(got[1]["priority"] == 0 and got[1]["concurrency_key"] is None
          and got[1]["concurrency_limit"] == 0
          and got[1]["deadline_in_ms"] == 0, got[1])
    full = json.loads(run([ARGS.dump, store, "--schedules", "--format",
                           "json"], 0).stdout)["schedules"]
    check(full == got, full, got)
    lines = run([ARGS.dump, store, "--schedules"], 0).stdout.splitlines()
    check("RUNS WITH" in lines[0], lines[0])
    export = next(l for l in lines if l.startswith("export "))
    check("prio -5, key warehouse/1, deadline 1 h 30 min" in export, export)
    plain = next(l for l in lines if l.startswith("plain "))
    check(re.search(r" allow,skip | skip,skip ", plain)
          and re.search(r"  -  +20", plain), plain)


def case_run_options_refused(d):
    store = os.path.join(d, "never.db")
    base = ["--cron", "* * * * *", "--policy", "p", "--payload", "{}"]
    bad = [
        (["--priority", "1001"], "--priority needs a whole number"),
        (["--key", "k"], "--key needs --key-limit"),
        (["--key-limit", "2"], "--key-limit goes with --key"),
        (["--key", "", "--key-limit", "1"], "bad --key"),
        (["--key", "k" * 129, "--key-limit", "1"], "1 to 128 bytes"),
        (["--deadline", "soon"], "bad --deadline"),
        (["--deadline", "2026-01-01"], "bad --deadline"),
        (["--deadline", "0s"], "bad --deadline"),
    ]
    for args, words in bad:
        p = put(store, "x", *(base + args), expect=1)
        check(words in p.stderr, "message lacks %r" % words, args, p.stderr)
    p = run([ARGS.replay, store, "--submit", "p", "--payload", "{}",
             "--deadline", "5m", "--plugin", "none.so"], 1)
    check("--deadline go with --schedule-put" in p.stderr, p.stderr)
    check(not os.path.exists(store), "a refused command created the store")


CASES = [case_put_list_replace_delete, case_a_due_tick_no_worker_fired,
         case_refused_writes_nothing, case_run_options,
         case_run_options_refused]


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--replay", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--helper", required=True)
    ARGS = ap.parse_args()
    failed = 0
    for case in CASES:
        d = tempfile.mkdtemp(prefix="sched-tools-")
        try:
            case(d)
            print("PASS", case.__name__)
        except Failure as e:
            failed += 1
            print("FAIL", case.__name__ + ":", e)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    print("%d case(s) failed" % failed if failed else "all cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
