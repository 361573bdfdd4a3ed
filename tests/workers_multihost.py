#!/usr/bin/env python3
"""workers_multihost.py -- three hosts' workers share one store.

    workers_multihost.py --replay LEDGER-REPLAY --dump LEDGER-DUMP
                         --plugin WORKERS-PLUGIN.so --store STORE|pg

STORE is an LMDB path (created in a new temporary directory when it is a
bare name) or `pg`: the server tests/pg_run.sh started (PL_TEST_PG_URI), in a
schema of its own.  30 runs of the `job` policy (5 calls, each with an effect
line) are submitted with `ledger-replay --submit`; three `ledger-replay
--worker` processes with distinct host ids (PL_WORKER_HOST) drain the queue.
Worker host-a hangs in the third call of every job it takes, before that
call's effect, and is SIGKILLed there; once its leases expire the other two
take its runs.  At the end: every run completed, every finished call's
effect was written exactly once (the effects file; only a call host-a was
in the middle of when killed may have run again), host-a's runs were finished by
other hosts, the survivors stop on SIGTERM with exit 0, and `ledger-dump
--verify` passes.  Every wait is for a condition, with a generous bound.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RUNS = 30
CALLS = 5
LEASE_MS = 3000  # long enough that a loaded machine never loses one
BOUND_S = 180


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def wait_for(what, cond, bound=BOUND_S):
    end = time.monotonic() + bound
    while not cond():
        if time.monotonic() > end:
            fail("waited %d s for %s" % (bound, what))
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replay", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--store", required=True)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="pl-multihost.")
    workers = []
    try:
        if a.store == "pg":
            base = os.environ.get("PL_TEST_PG_URI")
            if not base:
                fail("PL_TEST_PG_URI is not set: run through tests/pg_run.sh")
            sep = "&" if "?" in base else "?"
            store = base + sep + "schema=multihost"
        else:
            store = os.path.join(tmp, a.store)
        effects = os.path.join(tmp, "effects")
        env = dict(os.environ, WORK_EFFECTS=effects, WORK_HANG_HOST="host-a",
                   WORK_MS="20")

        def tool(*args, check=True):
            p = subprocess.run([a.replay, store, "--plugin", a.plugin] +
                               list(args), env=env, capture_output=True,
                               text=True, timeout=BOUND_S)
            if check and p.returncode != 0:
                fail("ledger-replay %s: exit %d: %s" %
                     (" ".join(args), p.returncode, p.stderr))
            return p

        def dump(*args):
            return subprocess.run([a.dump, store] + list(args), env=env,
                                  capture_output=True, text=True,
                                  timeout=BOUND_S)

        # the flags: --help tells them, bad values are usage errors
        p = subprocess.run([a.replay, "--help"], capture_output=True,
                           text=True, timeout=BOUND_S)
        if p.returncode != 0 or "--worker" not in p.stdout or \
                "--submit" not in p.stdout:
            fail("--help does not tell of --worker and --submit")
        for args, says in (
                (["--worker", "--concurrency", "0"], "--concurrency needs"),
                (["--worker", "--concurrency", "x9"], "--concurrency needs"),
                (["--worker", "--lease-ms", "50"], "--lease-ms needs"),
                (["--worker", "--lease-ms", "-1"], "--lease-ms needs"),
                (["--run", "r", "--lease-ms", "500"], "go with --worker"),
                (["--submit", "job"], "needs --payload"),
                (["--submit", "job", "--payload", "[1]"], "--payload"),
                (["--worker", "--payload", "{}"], "goes with --submit"),
                (["--worker", "--all"], "cannot be combined")):
            p = tool(*args, check=False)
            if p.returncode != 1 or says not in p.stderr:
                fail("ledger-replay %s: exit %d, %r" %
                     (" ".join(args), p.returncode, p.stderr))

        ids = ["job-%02d" % i for i in range(RUNS)]
        for rid in ids:
            out = tool("--submit", "job", "--payload",
                       json.dumps({"job": rid, "calls": CALLS}), "--new-id",
                       rid).stdout.strip()
            if out != rid:
                fail("--submit printed %r, not %r" % (out, rid))

        def completed():
            p = dump("--status", "completed", "--format", "jsonl")
            if p.returncode != 0:
                fail("ledger-dump: exit %d: %s" % (p.returncode, p.stderr))
            return [json.loads(l)["id"] for l in p.stdout.splitlines() if l]

        if completed():
            fail("a submitted run completed before any worker ran")

        for host in ("host-a", "host-b", "host-c"):
            w = subprocess.Popen(
                [a.replay, store, "--plugin", a.plugin, "--worker",
                 "--concurrency", "2", "--lease-ms", str(LEASE_MS)],
                env=dict(env, PL_WORKER_HOST=host), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
            workers.append((host, w))

        # host-a hangs in a call of a run it took: kill it there
        wait_for("host-a to hang in a call",
                 lambda: os.path.exists(effects + ".hang"))
        host_a = workers[0][1]
        host_a.send_signal(signal.SIGKILL)
        host_a.wait(timeout=BOUND_S)
        if host_a.returncode != -signal.SIGKILL:
            fail("host-a was not killed: exit %r" % host_a.returncode)

        wait_for("every run to complete",
                 lambda: len(completed()) == RUNS)

        for host, w in workers[1:]:
            w.send_signal(signal.SIGTERM)
        for host, w in workers[1:]:
            try:
                _, err = w.communicate(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                fail("%s did not stop on SIGTERM" % host)
            if w.returncode != 0:
                fail("%s exited %d on SIGTERM: %s" % (host, w.returncode, err))
            if "worker stopped" not in err:
                fail("%s said nothing on stopping: %r" % (host, err))

        # every call's effect exactly once, and host-a's runs finished
        # elsewhere
        with open(effects) as f:
            lines = [l.split() for l in f if l.strip()]
        keys = {}
        for key, host in lines:
            keys.setdefault(key, []).append(host)
        # a call host-a was making when it was killed (its effect written,
        # its result not yet durable) runs again where its run is
        # finished: the at-least-once window of an idempotent call.  No
        # other effect may repeat: every finished call ran once.
        twice = {k: h for k, h in keys.items() if len(h) > 1}
        in_flight = {k: h for k, h in twice.items()
                     if len(h) == 2 and h[0] == "host-a" and h[1] != "host-a"}
        if len(twice) != len(in_flight) or len(in_flight) > 2:
            fail("effects that ran more than once: %r" % twice)
        want = {"%s/0:%d" % (rid, 2 * i) for rid in ids for i in range(CALLS)}
        if set(keys) != want:
            fail("effects of calls that were not made, or calls without "
                 "their effect: %r" % sorted(set(keys) ^ want)[:10])
        taken = [rid for rid in ids
                 if any(k.startswith(rid + "/") and h[0] == "host-a"
                        for k, h in keys.items())
                 and any(k.startswith(rid + "/") and h[0] != "host-a"
                         for k, h in keys.items())]
        if not taken:
            fail("no run of host-a's was finished by another host")

        p = dump("--verify")
        if p.returncode != 0:
            fail("ledger-dump --verify: exit %d: %s%s" %
                 (p.returncode, p.stdout, p.stderr))
        print("ok: %d runs completed on %s, %d calls, %d in flight at the "
              "kill run again, %d run(s) of the killed host finished "
              "elsewhere" % (RUNS, "PostgreSQL" if a.store == "pg" else
                             "LMDB", len(keys), len(in_flight), len(taken)))
    except SystemExit:
        # what the workers said, to tell why
        for host, w in workers:
            if w.poll() is None:
                w.kill()
            try:
                _, err = w.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                err = ""
            print("%s (exit %r): %s" % (host, w.returncode, (err or "")[-2000:]),
                  file=sys.stderr)
        raise
    finally:
        for host, w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
