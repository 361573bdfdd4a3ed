#!/usr/bin/env python3
"""ledger-replay --prune and ledger-dump on deleted runs, as an operator
runs them, on a store order-demo fills.

usage: test_prune_tool.py LEDGER_REPLAY LEDGER_DUMP ORDER_DEMO ORDER_PLUGIN
"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "replay"))
from test_ledger_replay import damage_run_record  # noqa: E402

REPLAY = DUMP = DEMO = DEMO_PLUGIN = None


def run(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


class Prune(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pl-prune-")
        self.store = os.path.join(self.tmp, "store")
        self.arch = os.path.join(self.tmp, "arch")
        os.mkdir(self.arch)
        for order in ("A-1", "A-2", "A-3"):
            rc, _, err = run(DEMO, "--store", self.store, "--order", order,
                             "--quiet")
            self.assertEqual(rc, 0, err)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def runs(self):
        rc, out, err = run(DUMP, self.store, "--format", "jsonl")
        self.assertEqual(rc, 0, err)
        return sorted(json.loads(l)["id"] for l in out.splitlines())

    def test_dry_run_deletes_nothing(self):
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s", "--dry-run")
        self.assertEqual(rc, 0, err)
        self.assertIn("would delete order-A-2 (completed", out)
        self.assertIn("3 run(s) would be deleted", out)
        self.assertEqual(len(self.runs()), 3)

    def test_too_young_and_other_statuses_stay(self):
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "1d")
        self.assertEqual((rc, out.strip()), (0, "0 run(s) deleted, 0 skipped"),
                         err)
        for statuses in ("failed", "cancelled,superseded,continued"):
            rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                               "0s", "--status", statuses)
            self.assertEqual((rc, out.strip()), (0, "0 run(s) deleted, 0 skipped"),
                         err)
        self.assertEqual(len(self.runs()), 3)

    def test_a_past_date_prunes_what_ended_before_it(self):
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "2000-01-01T00:00:00Z")
        self.assertEqual((rc, out.strip()), (0, "0 run(s) deleted, 0 skipped"),
                         err)
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "2999-01-01T00:00:00Z")
        self.assertEqual(rc, 1, out)
        self.assertIn("bad --older-than", err)
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                         time.gmtime(time.time() + 3600)))
        self.assertEqual(rc, 1, out)
        self.assertEqual(len(self.runs()), 3)

    def test_archive_then_delete_then_import_back(self):
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s", "--archive", self.arch, "--json")
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["mode"], "prune")
        self.assertEqual(len(doc["runs"]), 3)
        for r in doc["runs"]:
            self.assertEqual(r["action"], "deleted")
            self.assertTrue(os.path.exists(r["archive"]), r)
        self.assertEqual(self.runs(), [])
        self.assertFalse([f for f in os.listdir(self.arch)
                          if f.endswith(".part")])
        # the dump says when a run was deleted, and how it ended
        rc, out, err = run(DUMP, self.store, "--run", "order-A-1")
        self.assertEqual(rc, 2)
        self.assertIn("was deleted on", err)
        self.assertIn("it was completed (policy order, head ", err)
        # and so do --verify --run and ledger-replay's modes that take a run
        deleted = ('ledger-dump: run "order-A-1" was deleted on ', "ledger-"
                   'replay: run "order-A-1" was deleted on ')
        for tool, args in ((DUMP, ["--verify", "--run", "order-A-1"]),
                           (REPLAY, ["--plugin", DEMO_PLUGIN, "--run",
                                     "order-A-1"]),
                           (REPLAY, ["--plugin", DEMO_PLUGIN, "--check",
                                     "--run", "order-A-1"]),
                           (REPLAY, ["--plugin", DEMO_PLUGIN, "--fork",
                                     "order-A-1", "--at", "0:1"]),
                           (REPLAY, ["--cancel", "order-A-1"]),
                           (REPLAY, ["--signal", "order-A-1", "--name", "go",
                                     "--payload", "{}"])):
            rc, out, err = run(tool, self.store, *args)
            self.assertEqual(rc, 2, (args, out, err))
            self.assertTrue(err.startswith(deleted), (args, err))
            self.assertEqual(err.count("\n"), 1, err)
        # the tombstone keeps the id; under another id the export loads
        arch = os.path.join(self.arch, "order-A-1.jsonl")
        rc, _, err = run(REPLAY, self.store, "--import", arch)
        self.assertEqual(rc, 1, err)
        rc, _, err = run(REPLAY, self.store, "--import", arch, "--new-id",
                         "back-1")
        self.assertEqual(rc, 0, err)
        rc, _, err = run(DUMP, self.store, "--verify", "--run", "back-1")
        self.assertEqual(rc, 0, err)

    def test_a_run_gone_after_it_was_chosen_is_said_skipped(self):
        # a prune said "delete ID" before the delete, which then left the
        # run (changed or deleted meanwhile, held by a worker): it says
        # what became of each run once that is durable, and counts the
        # runs left.  The prune is stopped (SIGSTOP) once it has archived
        # its first run, a run of its batch, whose delete comes after the
        # batch's archives; another prune deletes that run meanwhile.
        for attempt in range(3):
            got = self.prune_stopped_meanwhile(attempt)
            if got:
                break
        else:
            self.fail("the prune archived every run before it could be "
                      "stopped, three times")
        first, rc, out, err = got
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[-1], "30 run(s) deleted, 1 skipped", out)
        skipped = [l for l in lines if l.startswith("skipped ")]
        self.assertEqual(len(skipped), 1, out)
        self.assertTrue(skipped[0].startswith(
            "skipped order-A-0 (completed, ended "), out)
        self.assertIn("; archived to " + first, skipped[0])
        self.assertNotIn("deleted order-A-0", out)
        self.assertEqual(len([l for l in lines if l.startswith(
            "deleted order-B-")]), 30, out)
        self.assertIn("deleted order-B-07 (completed, ended ", out)

    def prune_stopped_meanwhile(self, attempt):
        """A store of 31 runs pruned with --archive, stopped after its
        first archive while another prune deletes that run; None when the
        prune could not be stopped before its batch's delete."""
        store = os.path.join(self.tmp, "many-%d" % attempt)
        rc, _, err = run(DEMO, "--store", store, "--order", "A-0", "--quiet")
        self.assertEqual(rc, 0, err)
        cut = math.ceil(time.time())  # A-0 ended before it, the others after
        time.sleep(cut + 1.1 - time.time())
        for k in range(30):
            rc, _, err = run(DEMO, "--store", store, "--order", "B-%02d" % k,
                             "--quiet")
            self.assertEqual(rc, 0, err)
        arch = os.path.join(self.tmp, "many-arch-%d" % attempt)
        os.mkdir(arch)
        p = subprocess.Popen([REPLAY, store, "--prune", "--older-than", "0s",
                              "--archive", arch], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        first = os.path.join(arch, "order-A-0.jsonl")
        raced = True
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(first) and p.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.0005)
            os.kill(p.pid, signal.SIGSTOP)
            archived = [f for f in os.listdir(arch) if f.endswith(".jsonl")]
            raced = p.poll() is None and len(archived) < 31
            if raced:
                rc, out, err = run(REPLAY, store, "--prune", "--older-than",
                                   time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                 time.gmtime(cut)))
                self.assertEqual(rc, 0, err)
                self.assertTrue(out.startswith(
                    "deleted order-A-0 (completed, ended "), out)
                self.assertTrue(out.endswith(
                    "\n1 run(s) deleted, 0 skipped\n"), out)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=120)
        return (first, p.returncode, out, err) if raced else None

    def test_an_archive_that_cannot_be_written_stops_the_prune(self):
        # the second run's file cannot be made: a directory is in its way
        os.mkdir(os.path.join(self.arch, "order-A-2.jsonl.part"))
        rc, _, err = run(REPLAY, self.store, "--prune", "--older-than", "0s",
                         "--archive", self.arch)
        self.assertEqual(rc, 5, err)
        self.assertIn('cannot archive run "order-A-2"', err)
        self.assertIn("1 run(s) deleted before it", err)
        self.assertEqual(self.runs(), ["order-A-2", "order-A-3"])

    def test_a_damaged_ledger_stops_an_archiving_prune(self):
        # order-A-2's tracking number changed in its steps: its export is
        # not verified, so the prune stops there (exit 5), order-A-3 kept;
        # not a run record passed over, with the others pruned (exit 2)
        with open(self.store, "rb") as f:
            raw = bytearray(f.read())
        at = raw.find(b"TRK-A-2")
        self.assertGreaterEqual(at, 0)
        while at >= 0:  # stale copies on free pages too
            raw[at + 4] ^= 0x01
            at = raw.find(b"TRK-A-2", at + 1)
        with open(self.store, "wb") as f:
            f.write(raw)
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s", "--archive", self.arch)
        self.assertEqual(rc, 5, out + err)
        self.assertIn('cannot archive run "order-A-2"', err)
        self.assertIn("1 run(s) deleted before it", err)
        self.assertNotIn("the others were pruned", err)
        self.assertEqual(self.runs(), ["order-A-2", "order-A-3"])
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s", "--archive", self.arch, "--json")
        self.assertEqual(rc, 5, out + err)
        self.assertEqual(json.loads(out)["exit"], 5)

    def test_an_archive_of_another_run_is_never_replaced(self):
        # another store's run under the same id (or this store's, its id
        # reused once its tombstone expired), archived to the same place:
        # its export was silently replaced, the only copy of that run lost
        other = os.path.join(self.tmp, "other")
        rc, _, err = run(DEMO, "--store", other, "--order", "A-1", "--quiet")
        self.assertEqual(rc, 0, err)
        rc, _, err = run(REPLAY, other, "--prune", "--older-than", "0s",
                         "--archive", self.arch)
        self.assertEqual(rc, 0, err)
        arch = os.path.join(self.arch, "order-A-1.jsonl")
        with open(arch, "rb") as f:
            first = f.read()
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s", "--archive", self.arch)
        self.assertEqual(rc, 5, err)
        self.assertIn('cannot archive run "order-A-1"', err)
        self.assertIn("holds the export of another run", err)
        self.assertIn("0 run(s) deleted before it", err)
        with open(arch, "rb") as f:
            self.assertEqual(f.read(), first, "the other run's archive kept")
        self.assertEqual(self.runs(), ["order-A-1", "order-A-2", "order-A-3"])
        self.assertFalse([f for f in os.listdir(self.arch)
                          if f.endswith(".part")])
        # the same run's export there (a prune killed before its delete):
        # written again, and the run deleted
        os.rename(arch, arch + ".other")
        rc, out, err = run(DUMP, self.store, "--run", "order-A-2",
                           "--format", "jsonl")
        self.assertEqual(rc, 0, err)
        with open(os.path.join(self.arch, "order-A-2.jsonl"), "w") as f:
            f.write(out.splitlines()[0] + "\n")
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s", "--archive", self.arch)
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.runs(), [])
        with open(os.path.join(self.arch, "order-A-2.jsonl")) as f:
            self.assertGreater(len(f.read().splitlines()), 1, "written whole")

    def test_bad_usage(self):
        for args, what in (
                (["--prune"], "needs --older-than"),
                (["--prune", "--older-than", "soon"], "bad --older-than"),
                (["--prune", "--older-than", "1d", "--status", "running"],
                 "bad --status"),
                (["--prune", "--older-than", "1d", "--archive",
                  "/no/such/dir"], "is not a directory"),
                (["--run", "x", "--plugin", "p.so", "--dry-run"],
                 "--dry-run goes with --upgrade or --prune"),
                (["--run", "x", "--plugin", "p.so", "--archive", self.arch],
                 "go with --prune"),
                (["--run", "x", "--plugin", "p.so", "--retain", "30d"],
                 "--retain goes with --worker"),
                (["--worker", "--plugin", DEMO_PLUGIN, "--retain", "soon"],
                 "bad --retain"),
                (["--run", "x", "--plugin", "p.so", "--retain-failed", "30d"],
                 "--retain-failed goes with --worker"),
                (["--worker", "--plugin", DEMO_PLUGIN, "--retain", "1d",
                  "--retain-failed", "0s"], "bad --retain-failed"),
                (["--prune", "--older-than", "1d", "--status",
                  "completed,"], "bad --status"),
                (["--prune", "--older-than", "1d", "--check"],
                 "cannot be combined")):
            rc, _, err = run(REPLAY, self.store, *args)
            self.assertEqual(rc, 1, (args, err))
            self.assertIn(what, err)
        self.assertEqual(len(self.runs()), 3)
        # checked before the store is opened: none is made
        fresh = os.path.join(self.tmp, "fresh")
        rc, _, err = run(REPLAY, fresh, "--worker", "--plugin", DEMO_PLUGIN,
                         "--retain-failed", "soon")
        self.assertEqual(rc, 1, err)
        self.assertIn("bad --retain-failed", err)
        self.assertFalse(os.path.exists(fresh))

    def listed(self):
        """The list's ids, and those listed damaged."""
        rc, out, err = run(DUMP, self.store, "--format", "jsonl")
        runs = [json.loads(l) for l in out.splitlines()]
        return (sorted(r["id"] for r in runs if "damaged" not in r),
                sorted(r["id"] for r in runs if "damaged" in r))

    def test_a_damaged_run_record_is_passed_over(self):
        # one run record that fails its checksum stopped every prune at
        # once, the runs before it not deleted either, and so every
        # worker's retention rule for good: it is kept (its status and age
        # are unknown) and the others are pruned, exit 2
        damage_run_record(self.store, "A-2")
        self.assertEqual(self.listed(), (["order-A-1", "order-A-3"],
                                         ["order-A-2"]))
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s", "--dry-run")
        self.assertEqual(rc, 2, err)
        self.assertEqual([l.split()[2] for l in out.splitlines()[:-1]],
                         ["order-A-1", "order-A-3"], out)
        self.assertIn("run 'order-A-2': its run record does not match", err)
        self.assertNotIn("prune stopped", err)
        # a dry run deletes nothing, and says so
        self.assertNotIn("were pruned", err)
        self.assertIn("were chosen", err)
        rc, out, err = run(REPLAY, self.store, "--prune", "--older-than",
                           "0s")
        self.assertEqual(rc, 2, err)
        self.assertIn("the others were pruned", err)
        self.assertTrue(out.endswith("2 run(s) deleted, 0 skipped\n"), out)
        self.assertEqual(self.listed(), ([], ["order-A-2"]))

    def test_a_workers_rule_goes_past_a_damaged_run_record(self):
        damage_run_record(self.store, "A-1")
        worker = subprocess.Popen([REPLAY, self.store, "--plugin",
                                   DEMO_PLUGIN, "--worker", "--retain", "1s"],
                                  stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(600):  # the rule runs every second
                if self.listed() == ([], ["order-A-1"]):
                    break
                time.sleep(0.1)
            self.assertEqual(self.listed(), ([], ["order-A-1"]))
        finally:
            worker.terminate()
            worker.communicate(timeout=60)

    def test_a_retention_age_is_no_date(self):
        # a date is no age: "--retain 2026-11-01" kept the runs as long as
        # the time from that date to the worker's start, taken as a
        # duration; it is refused before the store is opened, as a bad
        # duration is (docs/tools.md)
        fresh = os.path.join(self.tmp, "fresh")
        for flag, value in (("--retain", "2020-01-01"),
                            ("--retain-failed", "2026-11-01T00:00:00Z"),
                            ("--retain", "2026-11-01 00:00")):
            rc, _, err = run(REPLAY, fresh, "--worker", "--plugin",
                             DEMO_PLUGIN, flag, value)
            self.assertEqual(rc, 1, (flag, value, err))
            self.assertIn("bad %s" % flag, err)
            self.assertFalse(os.path.exists(fresh))


if __name__ == "__main__":
    REPLAY, DUMP, DEMO, DEMO_PLUGIN = sys.argv[1:5]
    del sys.argv[1:5]
    unittest.main(verbosity=1)
