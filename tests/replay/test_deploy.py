#!/usr/bin/env python3
"""Deploying a change with ledger-replay, on real stores: the order
workflow's runs recorded by order-plugin (v1), left live by SIGKILL, then
checked, gated and upgraded with the changed builds.

  v2        ships express: a run that recorded the old ship call diverges
  v2-gated  the same change behind pl_ctx_version("express-shipping"): the
            old run replays on its old branch, new runs take the new one

Covers the deploy gate (--check --live) failing v2 and passing v2-gated,
the tallies of versions and code identities, --upgrade's plan, --dry-run
writing nothing (the store's bytes checked), the upgrade itself (the old
run superseded, the links both ways in ledger-dump, the successor
finished by the new code, the repeated call named), --all-diverged, and
the refusals.  With --pg, the same cases on PostgreSQL (run under
tests/pg_run.sh: a schema per case, and "nothing written" checked on every
table's rows).  Reuses test_ledger_replay.py's helpers.  Standard library
only; exits 1 if any case fails.
"""
import argparse
import hashlib
import itertools
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ledger_replay as base  # noqa: E402

from test_ledger_replay import Store, build_id, check  # noqa: E402

ARGS = None
PG = None  # --pg: the server's URI
SCHEMAS = itertools.count(1)

SHIP_LIVE = 13  # order-demo's boundary after ship's result, before the end
EARLY = 10      # after charge_card's result: ship not reached


def psql(query):
    p = subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", PG, "-c",
                        query], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "psql failed", query, p.stderr)
    return p.stdout


def new_store():
    """A store: an LMDB file, or with --pg a schema of its own."""
    s = Store()
    if PG:
        schema = "deploy_%d" % next(SCHEMAS)
        s.path = PG + "&schema=" + schema

        def digest():
            # every table's rows, in one query (a psql each cost seconds)
            tables = psql("SELECT table_name FROM information_schema.tables "
                          "WHERE table_schema = '%s' ORDER BY 1" % schema)
            parts = " UNION ALL ".join(
                "SELECT %d AS n, '%s:' || md5(coalesce(string_agg(x::text, "
                "',' ORDER BY x::text), '')) AS d FROM %s.%s x"
                % (i, t, schema, t) for i, t in enumerate(tables.split()))
            return hashlib.sha256(psql(
                "SELECT string_agg(d, ',' ORDER BY n) FROM (%s) q" % parts)
                .encode()).hexdigest()
        s.data_digest = digest
    return s


def live_store():
    """Three runs by v1: SHIP (live, ship recorded), EARLY (live, before
    ship) and DONE (completed)."""
    s = new_store()
    p = s.demo("SHIP", crash_after=SHIP_LIVE)
    check(p.returncode == -9, "demo did not crash", p.stdout, p.stderr)
    p = s.demo("EARLY", crash_after=EARLY)
    check(p.returncode == -9, "demo did not crash", p.stdout, p.stderr)
    s.demo("DONE")
    return s


def dump_run(s, rid):
    p = base.run([ARGS.dump, s.path, "--run", rid], expect=0)
    return p.stdout


def once(pairs):
    """An object whose members are each there once (a run's successor
    and predecessor were once printed twice)."""
    keys = [k for k, _ in pairs]
    check(len(keys) == len(set(keys)), "a member printed twice", keys)
    return dict(pairs)


def dump_runs(s):
    p = base.run([ARGS.dump, s.path, "--format", "json"], expect=0)
    return {r["id"]: r
            for r in json.loads(p.stdout, object_pairs_hook=once)["runs"]}


def case_gate_fails_v2_and_passes_the_version_gate():
    s = live_store()
    try:
        before = s.data_digest()
        v1 = build_id(base.ARGS.order_plugin)
        # v1 itself passes
        doc, _ = s.tool_json("--check", "--live", expect=0)
        check(doc["summary"]["gate"] == {"pass": True, "live_runs": 2,
                                         "would_fail": [], "unreadable": []},
              "v1 does not pass its own gate", doc)
        # v2 strands order-SHIP: the gate fails, naming it
        doc, p = s.tool_json("--check", "--live",
                             plugins=[base.ARGS.order_plugin_v2], expect=5)
        ids = sorted(r["run_id"] for r in doc["runs"])
        check(ids == ["order-EARLY", "order-SHIP"],
              "--live checked runs that are final", ids)
        g = doc["summary"]["gate"]
        check(not g["pass"] and g["would_fail"] == ["order-SHIP"]
              and g["live_runs"] == 2, "wrong gate", g)
        codes = doc["summary"]["codes"]
        check(codes == [{"code": v1, "live_runs": 2,
                         "runs": ["order-EARLY", "order-SHIP"]}],
              "live runs not listed by the code that recorded them", codes)
        p = s.tool("--check", "--live", plugins=[base.ARGS.order_plugin_v2],
                   expect=5)
        check("deploy gate: FAIL" in p.stdout and
              "1 would fail under the loaded code: order-SHIP" in p.stdout,
              "text gate does not name the run", p.stdout)

        # the same change behind a version gate passes
        doc, _ = s.tool_json("--check", "--live",
                             plugins=[ARGS.order_plugin_v2_gated], expect=0)
        check(doc["summary"]["gate"]["pass"], "the gated change fails", doc)
        by = {r["run_id"]: r for r in doc["runs"]}
        vs = by["order-SHIP"]["versions"]
        check(vs == [{"change": "express-shipping", "version": 0,
                      "default": True, "at": "0:4"}],
              "order-SHIP does not replay the default version", vs)
        check(by["order-EARLY"]["versions"] == [],
              "order-EARLY has not reached the point", by["order-EARLY"])
        check(doc["summary"]["versions"] ==
              [{"change": "express-shipping", "version": 0, "default": True,
                "live_runs": 1, "runs": ["order-SHIP"]}],
              "wrong version tally", doc["summary"])
        p = s.tool("--check", "--live", plugins=[ARGS.order_plugin_v2_gated],
                   expect=0)
        check("express-shipping" in p.stdout and "version 0 (the default"
              in p.stdout and "deploy gate: PASS" in p.stdout,
              "text report lacks the versions", p.stdout)
        check(s.data_digest() == before, "a check wrote to the store")

        # under the gated code both live runs finish: SHIP on its old
        # branch, EARLY reaches the point and takes the new one
        s.tool("--all", plugins=[ARGS.order_plugin_v2_gated], expect=0)
        ships = s.effect_lines("ship ")
        check(any("order-EARLY/0:5 EARLY" in l for l in ships),
              "EARLY was not shipped after its marker", ships)
        check(len([l for l in ships if " SHIP " in l]) == 1,
              "SHIP was shipped twice", ships)
        doc, _ = s.tool_json("--check", plugins=[ARGS.order_plugin_v2_gated],
                             expect=0)
        by = {r["run_id"]: r for r in doc["runs"]}
        check(by["order-EARLY"]["versions"][0]["version"] == 1
              and not by["order-EARLY"]["versions"][0]["default"],
              "EARLY did not record version 1", by["order-EARLY"])
        check(doc["summary"]["versions"] == [] and doc["summary"]["codes"] ==
              [], "final runs tallied as live", doc["summary"])
        # the marker is a step of EARLY's ledger, shown as such
        dump = dump_run(s, "order-EARLY")
        check('"name":"version","change":"express-shipping","version":1'
              in dump.replace(" ", ""), "no marker in ledger-dump", dump)
    finally:
        s.close()


def case_upgrade_dry_run_then_upgrade():
    s = live_store()
    try:
        v2 = base.ARGS.order_plugin_v2
        before = s.data_digest()
        p = s.tool("--upgrade", "order-SHIP", "--dry-run", plugins=[v2],
                   expect=0)
        check("fork at 0:4" in p.stdout and
              "idempotency key order-SHIP/0:4" in p.stdout and
              "dry run: nothing written" in p.stdout, "no plan", p.stdout)
        doc, _ = s.tool_json("--upgrade", "--all-diverged", "--dry-run",
                             plugins=[v2], expect=0)
        check([r["run_id"] for r in doc["runs"]] == ["order-SHIP"],
              "the dry run planned other runs", doc)
        plan = doc["runs"][0]["plan"]
        check(plan["fork_at"] == "0:4" and plan["may_repeat"] ==
              [{"step_id": "0:4", "kind": "call", "name": "ship",
                "idempotency_key": "order-SHIP/0:4", "repeated": False}],
              "wrong plan", plan)
        check(s.data_digest() == before, "--dry-run wrote to the store")
        fx = s.effect_lines()

        p = s.tool("--upgrade", "order-SHIP", "--new-id", "order-SHIP.v2",
                   plugins=[v2], expect=0)
        check("run order-SHIP is superseded by run order-SHIP.v2" in p.stdout
              and "called again: ship at 0:4, another input" in p.stdout,
              "upgrade not reported", p.stdout)
        new_fx = s.effect_lines()[len(fx):]
        check(new_fx == ["ship order-SHIP.v2/0:4 SHIP via R-SHIP"],
              "the upgrade ran other calls than ship", new_fx)
        runs = dump_runs(s)
        old, new = runs["order-SHIP"], runs["order-SHIP.v2"]
        check(old["status"] == "superseded"
              and old["successor"] == "order-SHIP.v2"
              and "predecessor" not in old, "old run not superseded", old)
        check(new["status"] == "completed"
              and new["predecessor"] == "order-SHIP"
              and new["code"] == build_id(v2), "new run not linked", new)
        check("SUPERSEDED by order-SHIP.v2" in dump_run(s, "order-SHIP"),
              "ledger-dump does not show the successor")
        check("upgrade of  order-SHIP" in dump_run(s, "order-SHIP.v2"),
              "ledger-dump does not show the predecessor")
        base.run([ARGS.dump, s.path, "--verify"], expect=0)

        # the old run is final now
        p = s.tool("--run", "order-SHIP", plugins=[v2], expect=1)
        check("superseded by run 'order-SHIP.v2'" in p.stderr,
              "continuing a superseded run not refused", p.stderr)
        p = s.tool("--upgrade", "order-SHIP", plugins=[v2], expect=1)
        check("replays" in p.stderr or "superseded" in p.stderr, p.stderr)
        # a run that replays is not upgraded
        p = s.tool("--upgrade", "order-EARLY", plugins=[v2], expect=1)
        check("replays under the loaded code: nothing to upgrade" in p.stderr,
              "wrong refusal", p.stderr)
        # --all-diverged: nothing left to upgrade
        p = s.tool("--upgrade", "--all-diverged", plugins=[v2], expect=0)
        check("0 diverged" in p.stdout, "something upgraded again", p.stdout)
    finally:
        s.close()


def case_usage():
    s = live_store()
    try:
        for args, msg in (
                (["--upgrade"], "needs a run ID or --all-diverged"),
                (["--upgrade", "x", "--all-diverged"], "one of them"),
                (["--check", "--dry-run"], "--dry-run goes with --upgrade"),
                (["--check", "--all-diverged"],
                 "--all-diverged goes with --upgrade"),
                (["--run", "x", "--live"], "--live goes with --check"),
                (["--upgrade", "--all-diverged", "--new-id", "n"],
                 "--new-id goes with"),
                (["--upgrade", "x", "--fork", "y", "--at", "0:1"],
                 "cannot be combined")):
            p = s.tool(*args, expect=1)
            check(msg in p.stderr, "usage error not explained", args,
                  p.stderr)
        p = s.tool("--upgrade", "nope", expect=2)
        check("no run" in p.stderr, p.stderr)
        # a --new-id taken is refused as --fork refuses it, writing nothing
        before = s.data_digest()
        p = s.tool("--upgrade", "order-SHIP", "--new-id", "order-DONE",
                   plugins=[base.ARGS.order_plugin_v2], expect=1)
        check("'order-DONE' exists already" in p.stderr, p.stderr)
        check(s.data_digest() == before, "a refused --upgrade wrote")
    finally:
        s.close()


CASES = [case_gate_fails_v2_and_passes_the_version_gate,
         case_upgrade_dry_run_then_upgrade, case_usage]


def main():
    global ARGS, PG
    ap = argparse.ArgumentParser()
    for name in ("tool", "dump", "demo", "order-plugin", "order-plugin-v2",
                 "order-plugin-v2-gated"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--pg", action="store_true")
    ap.add_argument("cases", nargs="*")
    ARGS = ap.parse_args()
    if ARGS.pg:
        PG = os.environ.get("PL_TEST_PG_URI")
        check(PG, "--pg needs PL_TEST_PG_URI (run under tests/pg_run.sh)")
    base.ARGS = argparse.Namespace(tool=ARGS.tool, demo=ARGS.demo,
                                   order_plugin=ARGS.order_plugin,
                                   order_plugin_v2=ARGS.order_plugin_v2)
    return base.run_cases(CASES, ARGS.cases)


if __name__ == "__main__":
    sys.exit(main())
