#!/usr/bin/env python3
"""ledger-replay --cancel: a run the cancellation ends here (a waiting run
whose plugin is loaded; a suspended one, with or without it) is summed up
as --run sums it up, and its end is folded into the exit status (5:
cancelled); a run only marked (waiting, its plugin not loaded) says
"cancel delivered" and what it is now, exit 0, and --wake ends it later.
A reason holding control characters is printed with each escaped.
With --pg, the same on PostgreSQL (run under tests/pg_run.sh: a schema per
case).  Standard library only.  Exits 1 if any case fails.
"""
import argparse
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ledger_replay as base  # noqa: E402

from test_ledger_replay import Store, check  # noqa: E402

ARGS = None
PG = None  # --pg: the server's URI
SCHEMAS = itertools.count(1)


def new_store():
    """A store: an LMDB file, or with --pg a schema of its own."""
    s = Store()
    if PG:
        s.path = PG + "&schema=cancel_%d_%d" % (os.getpid(), next(SCHEMAS))
    return s


def start(s, policy, rid, expect_out):
    p = s.helper("start", ARGS.plugin, policy, rid, "{}")
    check(p.stdout == expect_out, "%s did not park" % rid, p.stdout)


def bare(s, *args, expect):
    """ledger-replay without any plugin."""
    return base.run([ARGS.tool, s.path] + list(args), env=s.env,
                    expect=expect)


def case_a_waiting_run_ended_here_is_summed_up_and_exits_5():
    s = new_store()
    try:
        P = [ARGS.plugin]
        start(s, "await", "aw-1", "waiting\n")
        p = s.tool("--cancel", "aw-1", "--reason", "no longer needed",
                   plugins=P, expect=5)
        # the summary --run prints: its status, its calls (the note of the
        # compensation executed, the first note served), its reason
        check(p.stdout.startswith(
            "run aw-1: cancelled\n  calls served from the ledger 1, "
            "executed 1; "), "no summary", p.stdout)
        check("\n  reason: no longer needed\n" in p.stdout, "no reason",
              p.stdout)
        check("delivered" not in p.stdout, "said delivered", p.stdout)
        check(p.stderr == "", "stderr", p.stderr)
        check([l for l in s.effect_lines("note ")
               if l.endswith(" cancelled")] != [], "no compensation",
              s.effect_lines())
        # --json: the same summary, the exit in the document
        start(s, "await", "aw-2", "waiting\n")
        doc, _ = s.tool_json("--cancel", "aw-2", "--reason", "gone",
                             plugins=P, expect=5)
        check([(r["run_id"], r["status"], r["reason"], r["error"],
                r["calls_executed"]) for r in doc["runs"]]
              == [("aw-2", "cancelled", "gone", "PL_ECANCELLED", 1)],
              "--json", doc)
        # ended: a second cancel is refused, exit 1, as the doc says
        p = s.tool("--cancel", "aw-2", plugins=P, expect=1)
        check("has ended (cancelled)" in p.stderr, "no reason", p.stderr)
    finally:
        s.close()


def case_a_waiting_run_only_marked_is_delivered_and_exits_0():
    s = new_store()
    try:
        start(s, "await", "aw-3", "waiting\n")
        p = bare(s, "--cancel", "aw-3", "--reason", "later", expect=0)
        check(p.stdout == "run aw-3: cancel delivered\n  now waiting (its "
              "policies are not loaded here: a worker, or --wake with its "
              "plugin, ends it)\n", "not marked only", p.stdout)
        p = bare(s, "--cancel", "aw-3", "--json", expect=0)
        doc = base.json.loads(p.stdout)
        check([(r["run_id"], r["status"], r["now"]) for r in doc["runs"]]
              == [("aw-3", "delivered", "waiting")] and doc["exit"] == 0,
              "--json", doc)
        # --wake with its plugin ends it, exit 5
        doc, _ = s.tool_json("--wake", plugins=[ARGS.plugin], expect=5)
        check([(r["run_id"], r["status"], r["reason"]) for r in doc["runs"]]
              == [("aw-3", "cancelled", "later")],
              "--wake", doc)
    finally:
        s.close()


def case_a_suspended_run_ends_now_with_or_without_its_plugin():
    s = new_store()
    try:
        start(s, "approval", "ap-1", "suspended\n")
        start(s, "approval", "ap-2", "suspended\n")
        p = bare(s, "--cancel", "ap-1", "--reason", "withdrawn", expect=5)
        check(p.stdout.startswith(
            "run ap-1: cancelled\n  calls served from the ledger 0, "
            "executed 0; ") and "\n  reason: withdrawn\n" in p.stdout,
            "no summary", p.stdout)
        doc, _ = s.tool_json("--cancel", "ap-2", plugins=[ARGS.plugin],
                             expect=5)
        check([(r["run_id"], r["status"]) for r in doc["runs"]]
              == [("ap-2", "cancelled")], "--json", doc)
        # with no reason given, the summary says so (it printed an empty
        # "reason: " line), and so does ledger-dump
        start(s, "approval", "ap-4", "suspended\n")
        p = bare(s, "--cancel", "ap-4", expect=5)
        check("\n  reason: -\n" in p.stdout, "no reason's line", p.stdout)
        p = base.run([ARGS.dump, s.path, "--run", "ap-4"], env=s.env,
                     expect=0)
        check("\n  CANCELLED  (no reason given)\n" in p.stdout,
              "ledger-dump's line", p.stdout)
        # a reason holding control characters is printed escaped: raw, it
        # rewrote the terminal and forged a line of the output
        start(s, "approval", "ap-3", "suspended\n")
        p = bare(s, "--cancel", "ap-3", "--reason",
                 "why\x1b[2J\r\nFAULT forged\x07\x7f\x9b", expect=5)
        check("\n  reason: why\\x1b[2J\\r\\nFAULT forged\\x07\\x7f"
              "\\u009b\n" in p.stdout, "the reason not escaped", p.stdout)
        check(not any(c in p.stdout for c in "\x1b\r\x07\x7f\x9b") and
              "\nFAULT" not in p.stdout, "a raw control character",
              repr(p.stdout))
    finally:
        s.close()


def case_a_run_ended_by_wake_or_cancel_counts_its_steps():
    """--wake and --cancel sum up a run they continue as --run does, its
    steps replayed and appended too: they said 0 and 0 whatever the run
    replayed and wrote."""
    s = new_store()
    try:
        P = [ARGS.plugin]
        for rid in ("aw-5", "aw-6", "aw-7"):
            start(s, "await", rid, "waiting\n")
            bare(s, "--cancel", rid, "--reason", "stop", expect=0)
        # the reference: --run continues it with pl_run_continue(), whose
        # outcome counts them
        doc, _ = s.tool_json("--run", "aw-5", plugins=P, expect=5)
        want = [(r["steps_replayed"], r["steps_appended"])
                for r in doc["runs"]]
        check(len(want) == 1 and want[0][0] > 0 and want[0][1] > 0,
              "--run counted no steps", doc)
        doc, _ = s.tool_json("--wake", plugins=P, expect=5)
        got = sorted((r["run_id"], r["steps_replayed"], r["steps_appended"])
                     for r in doc["runs"])
        check(got == [("aw-6",) + want[0], ("aw-7",) + want[0]],
              "--wake's steps are not --run's %r" % (want,), doc)
        # a run --cancel ends here is summed up by the same code
        start(s, "await", "aw-8", "waiting\n")
        doc, _ = s.tool_json("--cancel", "aw-8", plugins=P, expect=5)
        r = doc["runs"][0]
        check((r["steps_replayed"], r["steps_appended"]) == want[0],
              "--cancel's steps are not --run's %r" % (want,), doc)
    finally:
        s.close()


CASES = [case_a_waiting_run_ended_here_is_summed_up_and_exits_5,
         case_a_run_ended_by_wake_or_cancel_counts_its_steps,
         case_a_waiting_run_only_marked_is_delivered_and_exits_0,
         case_a_suspended_run_ends_now_with_or_without_its_plugin]


def main(cases=None):
    """Run @cases (default: this file's; test_submit_keys.py passes its
    own), with the tools' paths as flags."""
    global ARGS, PG
    ap = argparse.ArgumentParser()
    for name in ("tool", "plugin", "helper", "dump"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--pg", action="store_true")
    ap.add_argument("cases", nargs="*")
    ARGS = ap.parse_args()
    if ARGS.pg:
        PG = os.environ.get("PL_TEST_PG_URI")
        check(PG, "--pg needs PL_TEST_PG_URI (run under tests/pg_run.sh)")
    base.ARGS = argparse.Namespace(tool=ARGS.tool, helper=ARGS.helper,
                                   plugin=ARGS.plugin)
    return base.run_cases(cases or CASES, ARGS.cases)


if __name__ == "__main__":
    sys.exit(main())
