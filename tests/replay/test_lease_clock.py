#!/usr/bin/env python3
"""The lease renewer against a wall clock set back.

A process holds a run mid-call (replay-helper hold) with a short lease,
its wall clock an hour ahead and then stepped back, right after a
reading, by tests/replay/clock_step.c (LD_PRELOAD'ed into it alone: the
machine's clock is not touched).  Its leases live on the PostgreSQL
server's clock, so they expire a lease after the last renewal whatever the
process's clock says.  A renewer whose deadline was read from the wall
clock sleeps the hour out, and the run's lease expires under a process
still executing it; one timed on the monotonic clock goes on renewing.
Beside it, ledger-replay --all, asked again and again over several
leases, must skip the run as owned by a live process every time.

Run under tests/pg_run.sh.  Standard library only.  Exits 1 if any case
fails.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ledger_replay as base  # noqa: E402

from test_ledger_replay import Store, check  # noqa: E402

ARGS = None
LEASE_MS = 2000  # renewed every 667 ms: a loaded host stays well within it
LEASES_WATCHED = 5


def all_json(s):
    """ledger-replay --all --json: the runs it continued and those it
    skipped."""
    p = base.run([ARGS.tool, s.path, "--plugin", ARGS.plugin, "--all",
                  "--json"], env=s.env)
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        raise base.Failure("--all printed no JSON: %s\n%s\n%s"
                           % (e, p.stdout, p.stderr))
    return doc, p


def case_a_clock_set_back_takes_no_run_from_a_live_process():
    s = Store()
    s.path = os.environ["PL_TEST_PG_URI"] + "&schema=lease_clock_%d" % (
        os.getpid())
    step = os.path.join(s.dir, "step")
    env = dict(os.environ, LD_PRELOAD=ARGS.shim, CLOCK_STEP_S="3600",
               CLOCK_STEP_FILE=step)
    holder = subprocess.Popen([ARGS.helper, "hold", s.path, "held",
                               str(LEASE_MS)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        check(line == "waiting\n", "the holder did not start its call", line,
              holder.stderr.read() if holder.poll() is not None else "")
        with open("/proc/%d/maps" % holder.pid) as f:
            check(ARGS.shim in f.read(), "the clock shim is not loaded")
        doc, p = all_json(s)
        check(p.returncode == 0 and doc["runs"] == []
              and [k["run_id"] for k in doc["skipped"]] == ["held"],
              "before the step: the held run was not skipped", doc, p.stderr)

        # the holder's clock steps back an hour, right after its next
        # reading of the wall clock
        open(step, "w").close()
        end = time.monotonic() + LEASES_WATCHED * LEASE_MS / 1000
        looks = 0
        while time.monotonic() < end:
            if holder.poll() is not None:
                check(False, "the holder died", holder.stderr.read())
            doc, p = all_json(s)
            looks += 1
            check(p.returncode == 0 and doc["runs"] == [],
                  "a run a live process executes was taken from it after "
                  "its clock was set back (its lease expired: the renewer "
                  "slept on the wall clock)", doc, p.stderr)
            sk = doc["skipped"]
            check(len(sk) == 1 and sk[0]["run_id"] == "held"
                  and sk[0]["owner_pid"] == holder.pid,
                  "the held run was not skipped as a live process's", doc)
            time.sleep(0.2)
        check(looks >= 2, "too few looks", looks)

        out, err = holder.communicate(input="", timeout=60)
        check(holder.returncode == 0 and out == "completed\n",
              "the holder did not finish its run", out, err)
        holder = None
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        s.close()


CASES = [case_a_clock_set_back_takes_no_run_from_a_live_process]


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    for name in ("tool", "helper", "plugin", "shim"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("cases", nargs="*")
    ARGS = ap.parse_args()
    check(os.environ.get("PL_TEST_PG_URI"),
          "needs PL_TEST_PG_URI (run under tests/pg_run.sh)")
    base.ARGS = argparse.Namespace(tool=ARGS.tool, helper=ARGS.helper,
                                   plugin=ARGS.plugin)
    return base.run_cases(CASES, ARGS.cases)


if __name__ == "__main__":
    sys.exit(main())
