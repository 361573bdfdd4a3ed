#!/usr/bin/env python3
"""Golden runs and portable ledgers, with the real executables.

tests/golden/*.jsonl are exports of finished runs, recorded once and kept:
each is imported into a fresh store (ledger-replay --import), verified
(ledger-dump --verify) and replayed with today's plugin (ledger-replay
--check), which must still replay it without executing anything.  A code
change that would strand recorded runs fails here.  The exports hold the
code identities (build-ids) of the build that recorded them; a check
reports another identity and passes as long as the code replays the same.

Then the round trip an operator makes: ledger-dump --format jsonl on one
store, ledger-replay --import into another, --verify, --check; and a
changed, malformed or misdirected import refused with the right exit code
and nothing written.

    test_golden.py --dump ... --replay ... [--regenerate]

--regenerate writes the golden exports anew (after a deliberate change to
the recorded workflows).  Standard library only; exits 1 if a case fails.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZER_MARKS = ("Sanitizer", "runtime error:")
GOLDEN = {
    # file: (plugin option, run id, status)
    "order-completed.jsonl": ("order_plugin", "order-G-1", "completed"),
    "approval-suspended.jsonl": ("plugin", "ap-waiting", "suspended"),
    "approval-completed.jsonl": ("plugin", "ap-answered", "completed"),
    # a run parked on a timer (its wake time long past by now), one parked
    # waiting for an event, one cancelled in its wait that made a
    # compensating call
    "timer-waiting.jsonl": ("plugin", "nap-waiting", "waiting"),
    "event-waiting.jsonl": ("plugin", "await-waiting", "waiting"),
    "cancelled-compensated.jsonl": ("plugin", "await-cancelled", "cancelled"),
}


class Failure(Exception):
    pass


def check(cond, what, *context):
    if not cond:
        raise Failure(what + "".join("\n  " + str(c) for c in context))


def run(argv, expect=None, stdin=None, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                       timeout=120, env=full_env)
    for mark in SANITIZER_MARKS:
        check(mark not in p.stderr, "sanitizer report from %s" % argv[0],
              p.stderr)
    if expect is not None:
        check(p.returncode == expect,
              "%s exited %d, expected %d" % (" ".join(argv), p.returncode,
                                             expect),
              "stdout: " + p.stdout, "stderr: " + p.stderr)
    return p


class Dir:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="pl-golden-")
        self.env = {"ORDER_EFFECTS": self.path("effects.txt"),
                    "REPLAY_EFFECTS": self.path("effects.txt")}

    def path(self, name):
        return os.path.join(self.dir, name)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def effects(self):
        try:
            with open(self.path("effects.txt")) as f:
                return f.read()
        except FileNotFoundError:
            return ""


def dump(store, *args, expect=0):
    return run([ARGS.dump, store] + list(args), expect=expect)


def replay(store, *args, plugins=(), expect=None, stdin=None, env=None):
    argv = [ARGS.replay, store]
    for p in plugins:
        argv += ["--plugin", p]
    return run(argv + list(args), expect=expect, stdin=stdin, env=env)


def runs_in(store):
    out = dump(store, "--format", "jsonl").stdout
    return [json.loads(l)["id"] for l in out.splitlines()]


def export(store, run_id):
    return dump(store, "--run", run_id, "--format", "jsonl").stdout


def check_json(store, plugin, expect):
    p = replay(store, "--check", "--json", plugins=[plugin], expect=expect)
    return json.loads(p.stdout)


# ---- making the golden runs ------------------------------------------------

def make_golden(d):
    """The golden runs, in a store of their own; returns their exports."""
    store = d.path("golden.db")
    run([ARGS.demo, "--store", store, "--effects", d.path("effects.txt"),
         "--order", "G-1", "--quiet", "--plugin", ARGS.order_plugin],
        expect=0, env=d.env)
    for rid in ("ap-waiting", "ap-answered"):
        run([ARGS.helper, "start", store, ARGS.plugin, "approval", rid,
             '{"order": "G-1"}'], expect=0, env=d.env)
    replay(store, "--resume", "ap-answered", "--answer",
           '{"approved": true}', plugins=[ARGS.plugin], expect=0, env=d.env)
    for rid, policy, payload in (("nap-waiting", "nap", '{"ms": 2000}'),
                                 ("await-waiting", "await", "{}"),
                                 ("await-cancelled", "await", "{}")):
        run([ARGS.helper, "start", store, ARGS.plugin, policy, rid, payload],
            expect=0, env=d.env)
    replay(store, "--cancel", "await-cancelled", "--reason",
           "the customer withdrew", plugins=[ARGS.plugin], expect=5,
           env=d.env)
    return {f: export(store, rid) for f, (_, rid, _) in GOLDEN.items()}


def regenerate():
    d = Dir()
    try:
        for name, text in make_golden(d).items():
            with open(os.path.join(HERE, name), "w") as f:
                f.write(text)
            print("wrote", name)
    finally:
        d.close()


# ---- cases -----------------------------------------------------------------

def case_golden_runs_still_replay():
    for name, (plugin_opt, rid, status) in GOLDEN.items():
        d = Dir()
        try:
            store = d.path("fresh.db")
            golden = os.path.join(HERE, name)
            p = replay(store, "--import", golden, expect=0)
            check(p.stdout.startswith(rid + ": imported from "),
                  "no summary line", p.stdout)
            check(status in p.stdout, "the summary misses the status",
                  p.stdout)
            p = dump(store, "--verify", expect=0)
            check("0 fault(s)" in p.stdout, "verify found faults", p.stdout)
            plugin = getattr(ARGS, plugin_opt)
            doc = check_json(store, plugin, 0)
            r = doc["runs"][0]
            check(r["run_id"] == rid and r["check"] == "ok",
                  "the golden run does not replay", name, doc)
            check(d.effects() == "", "a check executed a call", d.effects())
            # every step of the export is in the store again
            with open(golden) as f:
                want = [json.loads(l) for l in f.read().splitlines()][1:]
            got = [json.loads(l) for l in export(store, rid).splitlines()][1:]
            check([w["id"] for w in want] == [g["id"] for g in got],
                  "the imported run has other steps", name)
            for w, g in zip(want, got):
                for k in ("actor", "type", "payload", "time_us", "code"):
                    check(w[k] == g[k], "step %s: %s differs" % (w["id"], k),
                          w, g)
        finally:
            d.close()


def ints_us(value, where):
    """Every "..._us" member, at any depth, is a JSON integer as printed
    (a time with 16 digits, 1795854118824200, was once printed as
    1.7958541188242e+15, which a JSON reader takes for a float)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k.endswith("_us") and v is not None:
                check(type(v) is int, "%s: %s is %r, not an integer" %
                      (where, k, v))
            ints_us(v, where)
    elif isinstance(value, list):
        for v in value:
            ints_us(v, where)


def case_times_print_as_integers():
    """The golden waiting run's steps have times whose microseconds end in
    00: every format ledger-dump prints gives them as integers."""
    d = Dir()
    try:
        store = d.path("fresh.db")
        golden = os.path.join(HERE, "event-waiting.jsonl")
        with open(golden) as f:
            check("e+15" in f.read(), "the golden export lost its case")
        replay(store, "--import", golden, expect=0)
        rid = GOLDEN["event-waiting.jsonl"][1]
        for args in (("--run", rid, "--format", "jsonl"),
                     ("--run", rid, "--format", "jsonl", "--type", "wait"),
                     ("--format", "jsonl")):
            for line in dump(store, *args).stdout.splitlines():
                check("e+" not in line, "exponent form", args, line)
                ints_us(json.loads(line), " ".join(args))
        for args in (("--run", rid, "--format", "json"),
                     ("--format", "json")):
            ints_us(json.loads(dump(store, *args).stdout), " ".join(args))
    finally:
        d.close()


def case_run_list_columns_line_up():
    """A waiting run's status says what it waits for, longer than the
    column once was: the columns after it still line up."""
    d = Dir()
    try:
        store = d.path("fresh.db")
        for name in ("timer-waiting.jsonl", "order-completed.jsonl"):
            replay(store, "--import", os.path.join(HERE, name), expect=0)
        lines = dump(store).stdout.splitlines()
        check(len(lines) == 3, "not two runs", lines)
        waiting = next(l for l in lines if l.startswith("nap-waiting "))
        check("waiting until " in waiting and "(due)" in waiting,
              "the status does not say when", waiting)
        at = lines[0].index("CREATED (UTC)")
        for line in lines[1:]:
            check(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  ",
                           line[at:]), "the columns do not line up", lines)
            check(line[:at].endswith("  ") and
                  line[:at].split()[-1].isdigit(),
                  "no step count before the time", lines)
    finally:
        d.close()


def case_code_identity_differs_but_replays():
    """Another build of the same policies: reported, not fatal."""
    d = Dir()
    try:
        store = d.path("fresh.db")
        replay(store, "--import",
               os.path.join(HERE, "approval-completed.jsonl"), expect=0)
        doc = check_json(store, ARGS.plugin_b, 0)
        r = doc["runs"][0]
        check(r["check"] == "ok", "another build does not replay", doc)
        check(r["code_changed"], "the code change is not reported", doc)
        check(d.effects() == "", "a check executed a call", d.effects())
    finally:
        d.close()


def case_changed_plugin_strands_the_golden_order():
    d = Dir()
    try:
        store = d.path("fresh.db")
        replay(store, "--import", os.path.join(HERE, "order-completed.jsonl"),
               expect=0)
        doc = check_json(store, ARGS.order_plugin_v2, 5)
        check(doc["runs"][0]["check"] == "diverged", "v2 did not diverge",
              doc)
        p = replay(store, "--check", plugins=[ARGS.order_plugin_v2], expect=5)
        check("first divergence at step 0:4" in p.stdout,
              "the divergence is not named", p.stdout)
        check(d.effects() == "", "a check executed a call", d.effects())
    finally:
        d.close()


def case_golden_suspended_run_resumes():
    d = Dir()
    try:
        store = d.path("fresh.db")
        replay(store, "--import",
               os.path.join(HERE, "approval-suspended.jsonl"), expect=0)
        replay(store, "--resume", "ap-waiting", "--answer",
               '{"approved": true}', plugins=[ARGS.plugin], expect=0,
               env=d.env)
        info = json.loads(dump(store, "--format", "jsonl").stdout)
        check(info["status"] == "completed", "not completed", info)
        dump(store, "--verify", expect=0)
        # the note the run made before it asked is served, not made again
        check("asked" not in d.effects(), "a recorded call ran again",
              d.effects())
    finally:
        d.close()


def imported(d, name):
    store = d.path("fresh.db")
    replay(store, "--import", os.path.join(HERE, name), expect=0)
    return store


def status_of(store, rid):
    return json.loads(export(store, rid).splitlines()[0])["status"]


def case_golden_timer_run_wakes():
    """Recorded asleep; its wake time is past: a wake goes on at once."""
    d = Dir()
    try:
        store = imported(d, "timer-waiting.jsonl")
        replay(store, "--wake", plugins=[ARGS.plugin], expect=0, env=d.env)
        check(status_of(store, "nap-waiting") == "completed",
              "the golden sleeper did not wake", export(store, "nap-waiting"))
        check("awake" in d.effects() and "napping" not in d.effects(),
              "the run did not go on from its sleep", d.effects())
        dump(store, "--verify", expect=0)
    finally:
        d.close()


def case_golden_event_run_takes_its_event():
    d = Dir()
    try:
        store = imported(d, "event-waiting.jsonl")
        p = dump(store, "--run", "await-waiting")
        check("waiting" in p.stdout and "go" in p.stdout,
              "the dump does not say what the run waits for", p.stdout)
        replay(store, "--signal", "await-waiting", "--name", "go",
               "--payload", '{"n": 7}', plugins=[ARGS.plugin], expect=0,
               env=d.env)
        text = export(store, "await-waiting")
        check(status_of(store, "await-waiting") == "completed", text)
        check('"got": {"n": 7}' in text or '"got":{"n":7}' in text,
              "the event is not the result", text)
        check("waiting" not in d.effects(), "a recorded call ran again",
              d.effects())
        dump(store, "--verify", expect=0)
    finally:
        d.close()


def case_golden_cancelled_run_stays_cancelled():
    d = Dir()
    try:
        store = imported(d, "cancelled-compensated.jsonl")
        p = dump(store, "--run", "await-cancelled")
        check("the customer withdrew" in p.stdout, "no reason shown",
              p.stdout)
        text = export(store, "await-cancelled")
        check('"cancelled"' in text, "no compensating call", text)
        # an ended run takes no event, and replaying it runs nothing
        replay(store, "--signal", "await-cancelled", "--name", "go",
               "--payload", "{}", plugins=[ARGS.plugin], expect=1)
        check(export(store, "await-cancelled") == text,
              "a refused signal changed the run")
        check(d.effects() == "", "a call ran", d.effects())
    finally:
        d.close()


def case_round_trip_between_stores():
    d = Dir()
    try:
        a, b = d.path("a.db"), d.path("b.db")
        run([ARGS.demo, "--store", a, "--effects", d.path("effects.txt"),
             "--order", "R-1", "--quiet", "--plugin", ARGS.order_plugin],
            expect=0, env=d.env)
        before = d.effects()
        text = export(a, "order-R-1")
        first = json.loads(text.splitlines()[0])
        check(first["kind"] == "run" and first["format"] == 2, "no run line",
              first)
        path = d.path("r1.jsonl")
        with open(path, "w") as f:
            f.write(text)
        replay(b, "--import", path, expect=0)
        # from stdin, under a new id, into the store it came from
        p = replay(a, "--import", "-", "--new-id", "copy", stdin=text,
                   expect=0)
        check(p.stdout.startswith("copy: imported from stdin"), p.stdout)
        for store in (a, b):
            dump(store, "--verify", expect=0)
            doc = check_json(store, ARGS.order_plugin, 0)
            check(all(r["check"] == "ok" for r in doc["runs"]), doc)
        check(sorted(runs_in(a)) == ["copy", "order-R-1"], runs_in(a))
        check(d.effects() == before, "a check or import executed a call")
        # the JSON summary
        c = d.path("c.db")
        p = replay(c, "--import", path, "--json", expect=0)
        doc = json.loads(p.stdout)
        check(doc["mode"] == "import" and doc["exit"] == 0 and
              doc["runs"][0]["run_id"] == "order-R-1" and
              doc["runs"][0]["status"] == "completed", doc)
        # with a filter, ledger-dump prints step lines only
        out = dump(a, "--run", "copy", "--format", "jsonl", "--type",
                   "action_call").stdout
        rows = [json.loads(l) for l in out.splitlines()]
        check(rows and all("kind" not in r and "record" not in r
                           for r in rows), rows)
    finally:
        d.close()


def case_refusals():
    d = Dir()
    try:
        a, b = d.path("a.db"), d.path("b.db")
        run([ARGS.demo, "--store", a, "--effects", d.path("effects.txt"),
             "--order", "T-1", "--quiet", "--plugin", ARGS.order_plugin],
            expect=0, env=d.env)
        lines = export(a, "order-T-1").splitlines()
        # make b a store with one run of its own
        run([ARGS.demo, "--store", b, "--effects", d.path("effects.txt"),
             "--order", "T-2", "--quiet", "--plugin", ARGS.order_plugin],
            expect=0, env=d.env)

        def refused(text, code, says):
            path = d.path("bad.jsonl")
            with open(path, "w") as f:
                f.write(text)
            p = replay(b, "--import", path, expect=code)
            check(says in p.stderr, "the refusal does not say '%s'" % says,
                  p.stderr)
            check(runs_in(b) == ["order-T-2"], "a refused import wrote",
                  runs_in(b))

        stored = [i for i, l in enumerate(lines)
                  if i and "record" in json.loads(l)]
        # a changed record byte: refused (5), naming the step
        i = stored[2]
        row = json.loads(lines[i])
        rec = row["record"]
        row["record"] = rec[:-4] + ("0" if rec[-4] != "0" else "1") + rec[-3:]
        bad = lines[:i] + [json.dumps(row)] + lines[i + 1:]
        refused("\n".join(bad) + "\n", 5, "step %s:" % row["id"])
        # a changed hash
        i = stored[1]
        row = json.loads(lines[i])
        row["hash"] = ("0" if row["hash"][0] != "0" else "1") + row["hash"][1:]
        bad = lines[:i] + [json.dumps(row)] + lines[i + 1:]
        refused("\n".join(bad) + "\n", 5,
                "step %s: hash does not match its record: the export was "
                "changed" % row["id"])
        # a dropped line
        refused("\n".join(lines[:-1]) + "\n", 5, "truncated")
        # malformed JSON, a truncated file: bad input (1)
        refused("\n".join(lines[:2] + ["{nope"] + lines[3:]) + "\n", 1,
                "line 3:")
        refused("\n".join(lines)[:-10], 1, "truncated")
        # an id the store has
        path = d.path("ok.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        p = replay(b, "--import", path, "--new-id", "order-T-2", expect=1)
        check("exists already" in p.stderr, p.stderr)
        # usage
        replay(b, "--import", d.path("missing.jsonl"), expect=1)
        replay(b, "--import", path, "--at", "0:1", expect=1)
        replay(b, "--import", path, "--new-id", "bad id", expect=1)
        check(runs_in(b) == ["order-T-2"], runs_in(b))
        # a store that cannot be opened
        junk = d.path("junk.db")
        with open(junk, "w") as f:
            f.write("not a store\n" * 100)
        replay(junk, "--import", path, expect=2)
    finally:
        d.close()


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    for opt in ("dump", "replay", "demo", "order-plugin", "order-plugin-v2",
                "plugin", "plugin-b", "helper"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--regenerate", action="store_true")
    ARGS = ap.parse_args()
    if ARGS.regenerate:
        regenerate()
        return 0
    failed = 0
    cases = [(n, f) for n, f in globals().items() if n.startswith("case_")]
    for name, fn in cases:
        try:
            fn()
            print("ok  ", name)
        except Exception:
            failed += 1
            print("FAIL", name)
            traceback.print_exc()
    print("%d case(s), %d failed" % (len(cases), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
