#!/usr/bin/env python3
"""ledger-replay --submit --key K --key-limit N binds what a --worker
takes: at most N runs of key K execute at once, the others stay queued
while runs without a key pass them, and a place freed goes to the key's
next run.  With --pg, the same on
PostgreSQL (run under tests/pg_run.sh: a schema per case).  Standard
library only.  Exits 1 if any case fails.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ledger_replay as base  # noqa: E402
import test_cancel_tool as tools  # noqa: E402  its stores and its main()

from test_ledger_replay import check  # noqa: E402

BOUND_S = 120  # the longest any condition is waited for


def statuses(s):
    p = base.run([tools.ARGS.dump, s.path, "--format", "jsonl"], env=s.env,
                 expect=0)
    return {r["id"]: r["status"] for r in map(json.loads,
                                               p.stdout.splitlines())}


def await_statuses(s, want):
    """Wait until every run of @want has its status there."""
    deadline = time.monotonic() + BOUND_S
    while True:
        got = statuses(s)
        if all(got.get(k) == v for k, v in want.items()):
            return got
        check(time.monotonic() < deadline, "never reached", want, got)
        time.sleep(0.02)


def case_a_key_limits_what_the_worker_takes():
    s = tools.new_store()
    worker = None
    held = os.path.join(s.dir, "kw-1")
    try:
        P = [tools.ARGS.plugin]
        open(held, "w").close()  # kw-1 executes until this goes
        for rid, key in (("kw-1", "tenant-1"), ("kw-2", "tenant-1"),
                         ("free-1", None)):
            payload = json.dumps({"path": os.path.join(s.dir, rid)})
            args = ["--submit", "hold", "--payload", payload, "--new-id", rid]
            if key:
                args += ["--key", key, "--key-limit", "1"]
            p = s.tool(*args, plugins=P, expect=0)
            check(p.stdout.strip() == rid, "--submit printed", p.stdout)
        env = dict(os.environ)
        env.update(s.env)
        worker = subprocess.Popen(
            [tools.ARGS.tool, s.path, "--plugin", tools.ARGS.plugin,
             "--worker",
             "--concurrency", "2"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        # kw-1 executes holding the key's one place; free-1, queued after
        # kw-2, passes it on the worker's other thread; kw-2 stays queued
        got = await_statuses(s, {"kw-1": "running", "free-1": "completed"})
        check(os.path.exists(held + ".in"), "kw-1 is not executing", got)
        check(got["kw-2"] == "submitted", "kw-2 went beside kw-1", got)
        check(not os.path.exists(os.path.join(s.dir, "kw-2.in")),
              "kw-2 started beside kw-1")
        # kw-1 ends: its place goes to kw-2
        os.unlink(held)
        await_statuses(s, {"kw-1": "completed", "kw-2": "completed"})
    finally:
        if os.path.exists(held):  # a failed check: let kw-1 end
            os.unlink(held)
        if worker:
            worker.terminate()
            _, err = worker.communicate(timeout=60)
            check(worker.returncode == 0, "the worker failed", err)
        s.close()


CASES = [case_a_key_limits_what_the_worker_takes]


if __name__ == "__main__":
    sys.exit(tools.main(CASES))
