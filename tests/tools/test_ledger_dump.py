#!/usr/bin/env python3
"""ledger-dump, run as an operator runs it, on stores the real engine makes.

usage: test_ledger_dump.py LEDGER_DUMP DUMP_FIXTURE [LEDGER_WEB]

dump_fixture (tests/tools/dump_fixture.c) writes the runs: a completed one
with nested calls and an error result, a failed one, a suspended one and one
whose process SIGKILLed itself inside a call.  Every output format is parsed
and checked field by field, and every exit code is provoked.
"""
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

DUMP = FIXTURE = WEB = None
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
ISO_US = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
HEX = re.compile(r"^[0-9a-f]{64}$")
RUNS = {"r-completed": "completed", "r-failed": "failed",
        "r-suspended": "suspended", "r-crashed": "running"}


def dump(*args, timeout=120):
    p = subprocess.run([DUMP, *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def jsonl(text):
    """Step (or run list) lines; an export's run line and the fields only
    an export has are left out, so exports and filtered output compare."""
    rows = []
    for line in text.splitlines():
        row = json.loads(line)
        if row.get("kind") == "run":
            continue
        row.pop("record", None)
        row.pop("derived", None)
        rows.append(row)
    return rows


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pl-dump-")
        cls.store = os.path.join(cls.tmp, "store")
        os.mkdir(cls.store)
        subprocess.run([FIXTURE, cls.store, "build"], check=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ok(self, *args):
        rc, out, err = dump(*args)
        self.assertEqual(rc, 0, err)
        return out


class ListTest(Base):
    def test_text(self):
        out = self.ok(self.store)
        lines = out.splitlines()
        self.assertIn("RUN", lines[0])
        self.assertEqual(len(lines), 1 + len(RUNS))
        for run, status in RUNS.items():
            line = next(l for l in lines if l.startswith(run + " "))
            self.assertIn(status, line)
        crashed = next(l for l in lines if l.startswith("r-crashed "))
        self.assertIn("running (owner gone: crashed)", crashed)
        self.assertRegex(crashed, r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")

    def test_json(self):
        doc = json.loads(self.ok(self.store, "--format", "json"))
        runs = {r["id"]: r for r in doc["runs"]}
        self.assertEqual(set(runs), set(RUNS))
        for run, status in RUNS.items():
            r = runs[run]
            self.assertEqual(r["status"], status)
            self.assertRegex(r["created"], ISO)
            self.assertRegex(r["updated"], ISO)
            self.assertGreaterEqual(r["updated_us"], r["created_us"])
            self.assertIsInstance(r["steps"], int)
            self.assertEqual(r["crashed"], run == "r-crashed")
        self.assertEqual(runs["r-completed"]["policy"], "order")
        self.assertEqual(runs["r-completed"]["payload"], {"customer": "ada"})
        self.assertFalse(runs["r-crashed"]["owner_alive"])
        self.assertIn("declined", runs["r-failed"]["reason"])
        s = runs["r-suspended"]
        self.assertEqual(s["prompt"], {"question": "ship order 42?"})
        self.assertRegex(s["resume_token"], r"^[0-9a-f]{32}$")
        self.assertEqual(s["suspended_path"], "0.0")

    def test_jsonl(self):
        rows = jsonl(self.ok(self.store, "--format", "jsonl"))
        self.assertEqual({r["id"] for r in rows}, set(RUNS))

    def test_filters(self):
        for status in ("completed", "failed", "suspended", "running"):
            rows = jsonl(self.ok(self.store, "--format", "jsonl",
                                 "--status", status))
            self.assertEqual([r["id"] for r in rows],
                             [k for k, v in RUNS.items() if v == status])
        rows = jsonl(self.ok(self.store, "--format=jsonl", "--policy=boom"))
        self.assertEqual([r["id"] for r in rows], ["r-failed"])
        rows = jsonl(self.ok(self.store, "--format", "jsonl", "--since", "1d"))
        self.assertEqual(len(rows), len(RUNS))
        rows = jsonl(self.ok(self.store, "--format", "jsonl", "--since",
                             "2999-01-01"))
        self.assertEqual(rows, [])
        rows = jsonl(self.ok(self.store, "--format", "jsonl", "--since",
                             "2000-01-01T00:00:00Z"))
        self.assertEqual(len(rows), len(RUNS))


class RunTest(Base):
    def steps(self, run, *extra):
        return jsonl(self.ok(self.store, "--run", run, "--format", "jsonl",
                             *extra))

    def test_text_marks(self):
        out = self.ok(self.store, "--run", "r-crashed")
        self.assertIn("owner gone: crashed", out)
        line = next(l for l in out.splitlines() if '"die"' in l)
        self.assertIn("IN DOUBT", line)
        out = self.ok(self.store, "--run", "r-completed")
        self.assertIn("ERROR result", out)
        self.assertNotIn("IN DOUBT", out)
        self.assertIn("xxx...", out)
        self.assertNotIn("x" * 300, out)
        full = self.ok(self.store, "--run", "r-completed", "--full")
        self.assertIn("x" * 300, full)
        out = self.ok(self.store, "--run", "r-failed")
        self.assertIn("FAILED", out)
        self.assertIn("the card was declined", out)
        out = self.ok(self.store, "--run", "r-suspended")
        self.assertIn("ship order 42?", out)
        self.assertRegex(out, r"resume token\s+[0-9a-f]{32}")
        self.assertIn("suspended here", out)
        self.assertNotIn("IN DOUBT", out)

    def test_jsonl_fields_and_chains(self):
        for run in RUNS:
            rows = self.steps(run)
            self.assertTrue(rows)
            genesis = hashlib.sha256(b"policyledger/run\0" +
                                     run.encode()).hexdigest()
            by_path = {}
            for r in rows:
                self.assertEqual(r["run"], run)
                self.assertEqual(r["id"], "%s:%d" % (r["path"], r["seq"]))
                self.assertIn(r["type"], ("text", "action_call",
                                          "action_result", "suspend",
                                          "resume", "side_effect", "error"))
                self.assertIsInstance(r["payload"], dict)
                self.assertRegex(r["time"], ISO_US)
                self.assertEqual(int(r["time"][-7:-1]), r["time_us"] % 10**6)
                self.assertTrue(r["code"] is None or
                                isinstance(r["code"], str))
                if r["type"] == "action_call":
                    self.assertIsNotNone(r["code"])
                self.assertTrue(r["hash"] is None or HEX.match(r["hash"]))
                self.assertRegex(r["prev_hash"], HEX)
                by_path.setdefault(r["path"], []).append(r)
            for path, ledger in by_path.items():
                self.assertEqual([r["seq"] for r in ledger],
                                 list(range(len(ledger))))
                self.assertEqual(ledger[0]["prev_hash"], genesis)
                for a, b in zip(ledger, ledger[1:]):
                    self.assertEqual(b["prev_hash"], a["hash"])
        rows = self.steps("r-completed")
        self.assertEqual(len(rows), 13)
        err = [r for r in rows if r["payload"].get("error") is True]
        self.assertTrue(err)
        self.assertTrue(all(r.get("mark") == "error" for r in err))
        crashed = self.steps("r-crashed")
        self.assertEqual(crashed[-1]["payload"]["policy"], "die")
        self.assertEqual(crashed[-1]["mark"], "in_doubt")

    def test_json_document(self):
        doc = json.loads(self.ok(self.store, "--run", "r-suspended",
                                 "--format", "json"))
        self.assertEqual(doc["run"]["id"], "r-suspended")
        self.assertRegex(doc["run"]["resume_token"], r"^[0-9a-f]{32}$")
        self.assertEqual([s["type"] for s in doc["steps"]],
                         ["action_call", "suspend"])
        self.assertEqual(doc["steps"][0]["mark"], "waiting")

    def test_step_filters(self):
        all_rows = self.steps("r-completed")
        rows = self.steps("r-completed", "--type", "action_call")
        self.assertEqual(rows, [r for r in all_rows
                                if r["type"] == "action_call"])
        rows = self.steps("r-completed", "--actor", "leaf")
        self.assertTrue(rows)
        self.assertEqual(rows, [r for r in all_rows if r["actor"] == "leaf"])
        self.assertEqual(self.steps("r-completed", "--policy", "leaf"), rows)
        rows = self.steps("r-completed", "--invocation", "0.0")
        self.assertEqual(rows, [r for r in all_rows
                                if r["path"] == "0.0" or
                                r["path"].startswith("0.0.")])
        self.assertTrue(all(r["path"] != "0" for r in rows))
        self.assertEqual(self.steps("r-completed", "--since", "3d"), all_rows)
        self.assertEqual(self.steps("r-completed", "--since", "2999-12-31"),
                         [])


class ChainTest(Base):
    def test_chain_formats(self):
        """A run never continued is a chain of one: a line of text, a line
        of JSON (jsonl), or one document (json) like every other."""
        out = self.ok(self.store, "--run", "r-completed", "--chain")
        self.assertRegex(out, r"^\* r-completed +completed +13 steps  "
                              r"created \d{4}-\d\d-\d\dT")
        self.assertEqual(len(out.splitlines()), 1)
        rows = self.ok(self.store, "--run", "r-completed", "--chain",
                       "--format", "jsonl").splitlines()
        self.assertEqual([json.loads(r)["id"] for r in rows], ["r-completed"])
        doc = json.loads(self.ok(self.store, "--run", "r-completed",
                                 "--chain", "--format", "json"))
        self.assertEqual([r["id"] for r in doc["chain"]], ["r-completed"])
        self.assertEqual(doc["chain"][0]["status"], "completed")
        rc, out, err = dump(self.store, "--run", "nope", "--chain",
                            "--format", "json")
        self.assertEqual((rc, out), (2, ""))
        self.assertIn('no run "nope"', err)


    def test_a_queued_run_has_no_owner_yet(self):
        """A run no process has taken yet (loop~2, submitted) is said to
        have no owner, not "pid 0 on " a host of no name."""
        out = self.ok(self.chain("loop"), "--run", "loop~2")
        self.assertIn("  status   submitted\n", out)
        self.assertIn("  owner    none yet, 0 attempt(s)\n", out)

    def chain(self, deleted, *forget):
        d = tempfile.mkdtemp(prefix="pl-chain-", dir=self.tmp)
        subprocess.run([FIXTURE, d, "chain", deleted, *forget], check=True,
                       timeout=60)
        return d

    def links(self, store, run):
        out = self.ok(store, "--run", run, "--chain", "--format", "jsonl")
        return [(r["id"], r["status"], "deleted" in r)
                for r in map(json.loads, out.splitlines())]

    def test_a_chain_whose_links_were_deleted(self):
        """A deleted link (pruned, as continued links are once old) is
        shown as deleted, and the chain goes on past it to its last link,
        whichever link is asked; a link whose tombstone is gone too is
        left out."""
        whole = [("loop", "continued"), ("loop~1", "continued"),
                 ("loop~2", "submitted")]
        for deleted in ("loop", "loop~1"):
            store = self.chain(deleted)
            want = [(i, s, i == deleted) for i, s in whole]
            for run in ("loop", "loop~1", "loop~2"):
                self.assertEqual(self.links(store, run), want, (deleted, run))
            for run in ("loop", "loop~2"):  # one of them deleted
                doc = json.loads(self.ok(store, "--run", run, "--chain",
                                         "--format", "json"))
                self.assertEqual([r["id"] for r in doc["chain"]],
                                 [i for i, _ in whole])
                lines = self.ok(store, "--run", run, "--chain").splitlines()
                self.assertEqual([l[2:].split()[0] for l in lines],
                                 [i for i, _ in whole])
                self.assertEqual([l[:2] for l in lines],
                                 ["* " if i == run else "  "
                                  for i, _ in whole])
                self.assertIn("deleted on ",
                              lines[[i for i, _ in whole].index(deleted)])
        store = self.chain("loop", "forget")
        for run in ("loop~1", "loop~2"):
            self.assertEqual(self.links(store, run),
                             [(i, s, False) for i, s in whole[1:]], run)
        rc, out, err = dump(store, "--run", "loop", "--chain")
        self.assertEqual((rc, out), (2, ""))
        self.assertIn('no run "loop"', err)

    def test_a_continued_run_is_not_called_superseded(self):
        """--run on a link of a chain continued as new names its links as
        such: it said "SUPERSEDED by loop~2 (which continues it with newer
        code)" and "upgrade of loop (superseded by this run)", the words of
        ledger-replay --upgrade's link, which no code change made."""
        store = self.chain("loop")  # loop deleted: its tombstone says
        middle = self.ok(store, "--run", "loop~1")
        self.assertIn("\n  continues   loop (continued as new into this "
                      "run)\n", middle)
        self.assertIn("\n  CONTINUED as loop~2 (pl_ctx_continue_as_new(): "
                      "the chain goes on there)\n", middle)
        last = self.ok(store, "--run", "loop~2")
        self.assertIn("\n  continues   loop~1 (continued as new into this "
                      "run)\n", last)
        for out in (middle, last):
            self.assertNotIn("SUPERSEDED", out)
            self.assertNotIn("upgrade of", out)

    def test_a_chain_goes_past_a_link_it_cannot_read(self):
        """A link whose record fails its checksum is shown as damaged, the
        chain goes on past it by the ids' rule, and the exit status is 2.
        The chain ended there with exit 0, silently: asked from its first
        link or its last, it was one link long; asked for the damaged one,
        "no run" in the store."""
        store = self.chain("loop")
        data = os.path.join(store, "data.mdb")
        with open(data, "rb") as f:
            raw = bytearray(f.read())
        # loop~1's run record: policy looper, payload {"left": 1}
        head = b"\xa6policy\xa6looper"
        spots = [m.start() for m in re.finditer(
            re.escape(head + b"\xa7payload\x81\xa4left\x01"), raw)]
        self.assertTrue(spots)
        for at in spots:
            raw[at + len(head) + 3] ^= 0x04  # in the name "payload"
        with open(data, "wb") as f:
            f.write(raw)
        for run in ("loop", "loop~1", "loop~2"):
            rc, out, err = dump(store, "--run", run, "--chain", "--format",
                                "jsonl")
            self.assertEqual(rc, 2, (run, out, err))
            rows = [json.loads(l) for l in out.splitlines()]
            self.assertEqual([r["id"] for r in rows],
                             ["loop", "loop~1", "loop~2"], run)
            self.assertIn("deleted", rows[0])
            self.assertIn("checksum", rows[1]["damaged"])
            self.assertEqual(rows[2]["status"], "submitted")
            self.assertIn("1 link(s) of the chain could not be read", err)
            rc, out, err = dump(store, "--run", run, "--chain")
            self.assertEqual(rc, 2, (run, out, err))
            lines = out.splitlines()
            self.assertEqual([l[2:].split()[0] for l in lines],
                             ["loop", "loop~1", "loop~2"], out)
            self.assertRegex(lines[1], r"damaged: .*checksum")
            self.assertEqual([l[:2] for l in lines],
                             ["* " if i == run else "  "
                              for i in ("loop", "loop~1", "loop~2")])
            doc = json.loads(self.ok_or(2, store, "--run", run, "--chain",
                                        "--format", "json"))
            self.assertEqual([r["id"] for r in doc["chain"]],
                             ["loop", "loop~1", "loop~2"])

    def ok_or(self, code, *args):
        rc, out, err = dump(*args)
        self.assertEqual(rc, code, err)
        return out

    def test_an_expired_tombstone_is_said_to_have_expired(self):
        """A tombstone past its time, not yet removed, no longer keeps the
        id (a start makes a new run): said so, in the past tense; it said
        it "keeps the id until" a time gone by."""
        store = self.chain("loop", "expire")
        time.sleep(0.01)
        rc, out, err = dump(store, "--run", "loop")
        self.assertEqual((rc, out), (2, ""), err)
        self.assertIn('run "loop" was deleted on ', err)
        self.assertIn("its tombstone kept the id until ", err)
        self.assertIn("the id is free again", err)
        self.assertNotIn("keeps", err)


class VerifyStatsTest(Base):
    def test_verify_clean(self):
        out = self.ok(self.store, "--verify")
        self.assertIn("4 run(s) checked, 0 fault(s)", out)
        self.ok(self.store, "--verify", "--run", "r-completed")
        doc = json.loads(self.ok(self.store, "--verify", "--format", "json"))
        self.assertEqual(doc["fault_count"], 0)
        self.assertEqual(doc["runs_checked"], 4)

    def changed_copy(self, name, needle, change):
        """A copy of the store with change(raw, at) made at each copy of
        needle in its file (stale ones on free pages too)."""
        bad = os.path.join(self.tmp, name)
        shutil.copytree(self.store, bad)
        data = os.path.join(bad, "data.mdb")
        with open(data, "rb") as f:
            raw = bytearray(f.read())
        spots = [m.start() for m in re.finditer(re.escape(needle), raw)]
        self.assertTrue(spots)
        for at in spots:
            change(raw, at)
        with open(data, "wb") as f:
            f.write(raw)
        return bad

    def test_verify_flipped_byte(self):
        # the payload of step 0:2, {"policy": "flaky", ...}, in msgpack
        bad = self.changed_copy("flipped", b"\xa6policy\xa5flaky",
                                lambda raw, at: raw.__setitem__(
                                    at + 10, raw[at + 10] ^ 0x20))
        rc, out, err = dump(bad, "--verify")
        self.assertEqual(rc, 3, out + err)
        fault = [l for l in out.splitlines() if l.startswith("FAULT")]
        self.assertEqual(len(fault), 1, out)
        self.assertIn("r-completed", fault[0])
        self.assertRegex(fault[0], r"\b0:[23]\b")
        rc, out, _ = dump(bad, "--verify", "--run", "r-failed")
        self.assertEqual(rc, 0)
        rc, out, _ = dump(bad, "--verify", "--format", "json")
        self.assertEqual(rc, 3)
        doc = json.loads(out)
        self.assertEqual(doc["faults"][0]["run"], "r-completed")

    def test_verify_checks_every_run_past_a_damaged_run_record(self):
        # each copy of r-failed's id in the file (its key in the runs
        # database, the records bound to it, stale pages) changed in turn:
        # the three other runs are checked every time, those listed before
        # it and those after, and a damage the listing meets is a fault
        with open(os.path.join(self.store, "data.mdb"), "rb") as f:
            raw = f.read()
        spots = [m.start() for m in re.finditer(b"r-failed", raw)]
        self.assertTrue(spots)
        faults = 0
        for i, at in enumerate(spots):
            for delta, bit in ((2, 0x01), (9, 0x10)):
                bad = os.path.join(self.tmp, "run-record-%d-%d" % (i, delta))
                shutil.copytree(self.store, bad)
                changed = bytearray(raw)
                changed[at + delta] ^= bit
                with open(os.path.join(bad, "data.mdb"), "wb") as f:
                    f.write(changed)
                rc, out, err = dump(bad, "--verify")
                self.assertIn(rc, (0, 3), out + err)
                for run in ("r-completed", "r-crashed", "r-suspended"):
                    self.assertIn("ok    run %s\n" % run, out,
                                  "flip at %d+%d: %s" % (at, delta, out))
                fault = [l for l in out.splitlines() if l.startswith("FAULT")]
                self.assertEqual(rc == 3, bool(fault), out)
                faults += bool(fault)
                shutil.rmtree(bad)
        self.assertGreater(faults, 0, "no change was reported")

    def damaged_copy(self):
        """A copy of the store whose r-failed run record (its root policy is
        "boom": no step names it so) is changed in every copy in the file:
        reading it fails its checksum."""
        head = b"\xa6policy\xa4boom"
        at_name = len(head) + 3  # in the name "payload"
        return self.changed_copy("damaged-run-record", head,
                                 lambda raw, at: raw.__setitem__(
                                     at + at_name, raw[at + at_name] ^ 0x04))

    def test_run_shows_the_steps_before_a_damaged_one(self):
        """--run on a run one of whose steps cannot be read (decoded) shows
        its record and the steps read before that one, says where it
        stopped, and exits 2: it showed nothing but the error, though
        the steps before it read well (as an export's lines do).  The call
        whose answer lies past the damage is not marked in doubt."""
        # step 0:2's payload, {"policy": "flaky", ...}: a msgpack byte
        # that is no type (0xc1) where its first key starts
        bad = self.changed_copy("damaged-step", b"\xa6policy\xa5flaky",
                                lambda raw, at: raw.__setitem__(at, 0xc1))
        before = ["0:0", "0.0:0", "0.0.0:0", "0.0:1", "0.0:2", "0.0.2:0",
                  "0.0:3", "0.0:4", "0:1"]
        rc, out, err = dump(bad, "--run", "r-completed")
        self.assertEqual(rc, 2, out + err)
        self.assertIn("run r-completed\n", out)
        self.assertIn("  steps    13\n", out)
        shown = [l.split()[0] for l in out.split("steps:\n")[1].splitlines()]
        self.assertEqual(shown, before, out)
        self.assertNotIn("IN DOUBT", out)
        self.assertIn("step 0:2", err)
        self.assertIn("the steps before it are shown", err)
        rc, out, err = dump(bad, "--run", "r-completed", "--format", "json")
        self.assertEqual(rc, 2, out + err)
        doc = json.loads(out)
        self.assertEqual([s["id"] for s in doc["steps"]], before)
        self.assertIn("step 0:2", doc["damaged"])
        self.assertFalse([s for s in doc["steps"] if "mark" in s and
                          s["mark"] != "error"])
        rc, out, err = dump(bad, "--run", "r-completed", "--format", "jsonl",
                            "--type", "action_call")
        self.assertEqual(rc, 2, out + err)
        self.assertEqual([json.loads(l)["id"] for l in out.splitlines()],
                         ["0:0", "0.0:0", "0.0:2"])
        # the export, which --import takes, is refused whole, as before
        rc, out, err = dump(bad, "--run", "r-completed", "--format", "jsonl")
        self.assertEqual((rc, out), (2, ""), err)
        shutil.rmtree(bad)

    def test_run_shows_its_record_when_its_first_step_is_damaged(self):
        """--run on a run whose first step cannot be read shows its record
        and no step, with where it stopped (in JSON "damaged"): it printed
        nothing but the error, where damage one step later showed the
        record and the steps before it."""
        # step 0:0's payload, {"policy": "human", ...}
        bad = self.changed_copy("damaged-first", b"\xa6policy\xa5human",
                                lambda raw, at: raw.__setitem__(at, 0xc1))
        rc, out, err = dump(bad, "--run", "r-suspended")
        self.assertEqual(rc, 2, out + err)
        self.assertIn("run r-suspended\n", out)
        self.assertIn("  status   suspended\n", out)
        self.assertEqual(out.split("steps:\n")[1], "", out)
        self.assertIn("step 0:0", err)
        self.assertIn("its record is shown", err)
        rc, out, err = dump(bad, "--run", "r-suspended", "--format", "json")
        self.assertEqual(rc, 2, out + err)
        doc = json.loads(out)
        self.assertEqual((doc["run"]["id"], doc["steps"]), ("r-suspended", []))
        self.assertIn("step 0:0", doc["damaged"])
        rc, out, err = dump(bad, "--run", "r-suspended", "--format", "jsonl")
        self.assertEqual((rc, out), (2, ""), err)
        shutil.rmtree(bad)

    def test_stats_go_past_a_damaged_run_record(self):
        # one run record that cannot be read made --stats refuse the whole
        # store ("cannot read the store's statistics"): the runs are
        # counted past it, it is counted apart and named, exit 2
        bad = self.damaged_copy()
        rc, out, err = dump(bad, "--stats")
        self.assertEqual(rc, 2, out + err)
        self.assertRegex(out, r"runs\s+4\n")
        self.assertIn("  (damaged)  1 (their records cannot be read", out)
        self.assertIn('run "r-failed": its record cannot be read', err)
        rc, out, err = dump(bad, "--stats", "--format", "json")
        self.assertEqual(rc, 2, out + err)
        doc = json.loads(out)
        self.assertEqual((doc["runs"], doc["damaged"], doc["crashed"]),
                         (4, 1, 1))
        self.assertEqual(doc["by_status"]["failed"], 0)
        self.assertEqual(doc["by_status"]["completed"], 1)
        shutil.rmtree(bad)

    def test_list_goes_past_a_damaged_run_record(self):
        # the list shows the three other runs and r-failed as damaged, and
        # exits 2
        bad = self.damaged_copy()
        rc, out, err = dump(bad)
        self.assertEqual(rc, 2, out + err)
        for run in ("r-completed", "r-crashed", "r-suspended"):
            self.assertRegex(out, r"(?m)^%s +\S+ +\S+" % run, out)
        self.assertRegex(out, r"(?m)^r-failed +damaged: .*checksum", out)
        self.assertIn("1 run record(s) could not be read", err)
        rc, out, err = dump(bad, "--format", "jsonl")
        self.assertEqual(rc, 2, out + err)
        rows = [json.loads(l) for l in out.splitlines()]
        self.assertEqual([r["id"] for r in rows],
                         ["r-completed", "r-crashed", "r-failed",
                          "r-suspended"])
        self.assertIn("checksum", rows[2]["damaged"])
        rc, out, err = dump(bad, "--status", "completed", "--format", "json")
        self.assertEqual(rc, 2, out + err)
        self.assertEqual([r["id"] for r in json.loads(out)["runs"]],
                         ["r-completed", "r-failed"])
        shutil.rmtree(bad)

    def test_verify_names_a_changed_last_step(self):
        # the note of r-completed's last root step, 0:4; its bytes may be in
        # the run's state record and on stale pages too, so each copy is
        # changed alone, and the one in the step must be named
        with open(os.path.join(self.store, "data.mdb"), "rb") as f:
            raw = f.read()
        needle = b"x" * 300
        spots = []
        at = raw.find(needle)
        while at >= 0:
            spots.append(at)
            at = raw.find(needle, at + 1)
        self.assertTrue(spots)
        named = 0
        for i, at in enumerate(spots):
            bad = os.path.join(self.tmp, "flipped-last-%d" % i)
            shutil.copytree(self.store, bad)
            changed = bytearray(raw)
            changed[at + 100] = ord("y")
            with open(os.path.join(bad, "data.mdb"), "wb") as f:
                f.write(changed)
            rc, out, err = dump(bad, "--verify", "--run", "r-completed")
            self.assertIn(rc, (0, 3), out + err)  # 0: a stale copy
            if rc == 3:
                self.assertIn("FAULT run r-completed", out)
            named += "step 0:4" in out
        self.assertEqual(named, 1)

    def test_verify_passes_over_a_run_deleted_while_it_checks(self):
        # a run that a prune or a retention rule deletes while --verify
        # goes through the store is gone, not damaged: it was reported as
        # a fault ("not found: no run ..."), exit 3.  The check is held on
        # a full pipe while the last two runs of its list are deleted: it
        # lists every run before it checks the first.
        store = os.path.join(self.tmp, "pruned-while-checked")
        os.mkdir(store)
        subprocess.run([FIXTURE, store, "many", "800"], check=True,
                       timeout=120)
        r, w = os.pipe()
        # the smallest pipe: the check stops some 500 runs in ("ok    run
        # m-N" a line, and stdio's 4 kB buffer)
        self.assertEqual(fcntl.fcntl(w, 1031, 4096), 4096)  # F_SETPIPE_SZ
        p = subprocess.Popen([DUMP, store, "--verify"], stdout=w,
                             stderr=subprocess.PIPE)
        os.close(w)
        with os.fdopen(r, "rb") as reader:
            while True:  # until the pipe is full: it waits to write
                held = bytearray(4)
                fcntl.ioctl(reader.fileno(), 0x541B, held)  # FIONREAD
                if int.from_bytes(held, sys.byteorder) >= 4096:
                    break
                self.assertIsNone(p.poll(), "it did not wait to write")
                time.sleep(0.01)
            subprocess.run([FIXTURE, store, "delete", "m-98", "m-99"],
                           check=True, timeout=60)
            out = reader.read().decode()
        err = p.stderr.read().decode()
        p.stderr.close()
        self.assertEqual(p.wait(timeout=60), 0, out[-300:] + err)
        self.assertNotIn("FAULT", out)
        self.assertNotIn("run m-99\n", out)
        self.assertIn("ok    run m-97\n", out)
        self.assertIn("798 run(s) checked, 0 fault(s)", out)
        shutil.rmtree(store)

    def test_stats(self):
        out = self.ok(self.store, "--stats")
        self.assertRegex(out, r"runs\s+4")
        self.assertIn("largest runs", out)
        doc = json.loads(self.ok(self.store, "--stats", "--format", "json"))
        self.assertEqual(doc["runs"], 4)
        self.assertEqual(doc["by_status"], {"running": 1, "suspended": 1,
                                            "completed": 1, "failed": 1,
                                            "submitted": 0, "waiting": 0,
                                            "cancelled": 0, "superseded": 0,
                                            "continued": 0})
        self.assertEqual((doc["crashed"], doc["damaged"]), (1, 0))
        self.assertGreater(doc["file_bytes"], 0)
        self.assertGreater(doc["used_pages"], 0)
        self.assertGreaterEqual(doc["free_pages"], 0)
        self.assertEqual(doc["largest"][0]["id"], "r-completed")
        self.assertEqual(doc["largest"][0]["steps"], 13)


class BadInputTest(Base):
    def expect(self, code, args, words):
        rc, out, err = dump(*args)
        self.assertEqual(rc, code, out + err)
        for w in words:
            self.assertIn(w, err)

    def test_usage(self):
        self.expect(1, [], ["no store"])
        self.expect(1, [self.store, "--bogus"], ['unknown option "--bogus"'])
        self.expect(1, [self.store, "--since", "yesterday"], ["bad --since"])
        self.expect(1, [self.store, "--since", "2026-13-01"], ["bad --since"])
        # not a day: refused, not read as the 1st of March
        self.expect(1, [self.store, "--since", "2026-02-29"], ["bad --since"])
        self.expect(1, [self.store, "--since", "2100-02-29T00:00Z"],
                    ["bad --since"])
        self.ok(self.store, "--since", "2028-02-29")
        self.ok(self.store, "--since", "2000-02-29T12:00:00Z")
        self.expect(1, [self.store, "--since", "99999999999999d"],
                    ["bad --since"])
        self.expect(1, [self.store, "--since", "10x"], ["bad --since"])
        self.expect(1, [self.store, "--format", "xml"], ["unknown --format"])
        self.expect(1, [self.store, "--status", "done"], ["unknown --status"])
        self.expect(1, [self.store, "--run"], ["--run needs a value"])
        self.expect(1, [self.store, "--type", "nope", "--run", "x"],
                    ["unknown --type"])
        self.expect(1, [self.store, "--invocation", "0..1", "--run", "x"],
                    ["bad --invocation"])
        self.expect(1, [self.store, "--follow"], ["need --run"])
        self.expect(1, [self.store, "other"], ["unexpected argument"])

    def test_help(self):
        rc, out, _ = dump("--help")
        self.assertEqual(rc, 0)
        for w in ("usage: ledger-dump STORE", "Examples:", "--follow",
                  "Exit codes"):
            self.assertIn(w, out)
        # every status --status takes, and every step type --type takes,
        # is named by --help and by the refusal of an unknown one
        words = " ".join(out.split())
        _, _, refusal = dump(self.store, "--status", "done")
        for status in ("running", "suspended", "completed", "failed",
                       "submitted", "waiting", "cancelled", "superseded",
                       "continued"):
            self.ok(self.store, "--status", status)
            self.assertRegex(words, r"\b%s\b" % status)
            self.assertRegex(refusal, r"\b%s\b" % status)
        _, _, refusal = dump(self.store, "--run", "r-completed", "--type",
                             "nope")
        for t in ("text", "action_call", "action_result", "suspend",
                  "resume", "side_effect", "error", "wait", "event",
                  "cancel"):
            self.ok(self.store, "--run", "r-completed", "--type", t)
            self.assertRegex(words, r"\b%s\b" % t)
            self.assertRegex(refusal, r"\b%s\b" % t)

    def test_output_that_cannot_be_written(self):
        """A full disk under the output is exit 2 and a line, not exit 0
        with the output lost (an export taken with > run.jsonl)."""
        for args in ([], ["--run", "r-completed", "--format", "jsonl"],
                     ["--format", "json"], ["--stats"], ["--help"]):
            with open("/dev/full", "w") as full:
                p = subprocess.run([DUMP, self.store, *args], stdout=full,
                                   stderr=subprocess.PIPE, text=True,
                                   timeout=120)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(p.stderr, "ledger-dump: cannot write the "
                             "output: No space left on device\n")

    def test_missing_store_is_not_created(self):
        missing = os.path.join(self.tmp, "nothing-here")
        self.expect(2, [missing], ["does not exist"])
        self.assertFalse(os.path.exists(missing))
        self.assertFalse(os.path.exists(missing + "-lock"))
        empty_dir = os.path.join(self.tmp, "empty-dir")
        os.mkdir(empty_dir)
        self.expect(2, [empty_dir], ["does not exist"])
        self.assertEqual(os.listdir(empty_dir), [])

    def test_not_a_store(self):
        empty = os.path.join(self.tmp, "empty")
        open(empty, "w").close()
        self.expect(2, [empty], ["cannot open store"])
        text = os.path.join(self.tmp, "text")
        with open(text, "w") as f:
            f.write("this is not an LMDB file\n" * 1000)
        self.expect(2, [text], ["not an LMDB store"])

    def test_no_permission(self):
        if os.geteuid() == 0:
            self.skipTest("running as root: permissions are not enforced")
        locked = os.path.join(self.tmp, "locked")
        shutil.copytree(self.store, locked)
        os.chmod(locked, 0)
        try:
            self.expect(2, [locked], ["cannot open store"])
        finally:
            os.chmod(locked, 0o700)

    def test_unknown_run(self):
        self.expect(2, [self.store, "--run", "no-such-run"],
                    ['no run "no-such-run"'])
        self.expect(2, [self.store, "--verify", "--run", "no-such-run"],
                    ['no run "no-such-run"'])


class FollowTest(Base):
    def follow(self, store, run, writer_argv, gate):
        """Start the writer, wait for its first call, follow the run with
        --format jsonl, open the gate: the rows stored before, the lines
        followed, and what the follower said on stderr."""
        writer = subprocess.Popen(writer_argv)
        follower = None
        try:
            for _ in range(1200):  # until the first call is stored
                rc, out, _ = dump(store, "--run", run, "--format", "jsonl")
                if rc == 0 and len(jsonl(out)) >= 2:
                    break
                time.sleep(0.05)
            before = jsonl(out)
            self.assertGreaterEqual(len(before), 2)
            errfile = open(os.path.join(self.tmp, run + ".err"), "w+")
            follower = subprocess.Popen(
                [DUMP, store, "--run", run, "--follow", "--format", "jsonl"],
                stdout=subprocess.PIPE, stderr=errfile, text=True)
            first = follower.stdout.readline()  # it is following now
            self.assertEqual(json.loads(first), before[0])
            open(gate, "w").close()  # let the writer go on
            rest = follower.stdout.read()  # until it exits by itself
            self.assertEqual(follower.wait(timeout=120), 0)
            errfile.seek(0)
            err = errfile.read()
            errfile.close()
            self.assertEqual(writer.wait(timeout=120), 0)
        finally:
            for p in (writer, follower):
                if p and p.poll() is None:
                    p.kill()
                    p.wait()
        return before, jsonl(first + rest), err

    def test_follow_a_writer(self):
        store = os.path.join(self.tmp, "slow")
        gate = os.path.join(self.tmp, "go")
        os.mkdir(store)
        # the writer makes one call, then waits for the gate file
        before, rows, err = self.follow(
            store, "r-slow", [FIXTURE, store, "slow", "r-slow", "8", "100",
                              gate], gate)
        final = jsonl(self.ok(store, "--run", "r-slow", "--format", "jsonl"))
        self.assertEqual(rows, final)
        self.assertLess(len(before), len(rows))
        self.assertEqual(rows[:len(before)], before)
        self.assertEqual(rows[-1]["payload"], {"text": "slow done"})
        self.assertEqual(sum(1 for r in rows if r["path"] == "0" and
                             r["type"] == "action_result"), 8)
        self.assertIn("is completed", err)

    def test_follow_a_run_that_grows_in_bursts(self):
        """A long run appended in bursts (40 calls, then 300 ms, more than
        a poll): each poll reads only from where a new step can be, not
        the whole run again, and the lines are still the run's, each once,
        in the store's order."""
        store = os.path.join(self.tmp, "bursts")
        gate = os.path.join(self.tmp, "bursts-go")
        os.mkdir(store)
        before, rows, err = self.follow(
            store, "r-bursts", [FIXTURE, store, "bursts", "r-bursts", "400",
                                "40", "300", gate], gate)
        final = jsonl(self.ok(store, "--run", "r-bursts", "--format",
                              "jsonl"))
        self.assertEqual(rows, final)
        self.assertEqual(rows[:len(before)], before)
        self.assertEqual(sum(1 for r in rows if r["path"] == "0" and
                             r["type"] == "action_result"), 400)
        self.assertEqual(rows[-1]["payload"], {"text": "slow done"})
        self.assertIn("is completed", err)

    def test_follow_a_fan_out(self):
        """Two callees at once append their steps interleaved, not in tree
        order: each step is printed once, none is left out."""
        store = os.path.join(self.tmp, "fan")
        gate = os.path.join(self.tmp, "fan-go")
        os.mkdir(store)
        _, rows, err = self.follow(
            store, "r-fan", [FIXTURE, store, "fan", "r-fan", "100", gate],
            gate)
        ids = [r["id"] for r in rows]
        final = jsonl(self.ok(store, "--run", "r-fan", "--format", "jsonl"))
        self.assertEqual(len(ids), len(set(ids)), "a step printed twice")
        self.assertEqual(sorted(ids), sorted(r["id"] for r in final))
        self.assertEqual(sum(1 for r in final if r["type"] == "action_call"
                             and r["path"] in ("0.2", "0.3")), 12)
        self.assertIn("is completed", err)

    def test_follow_a_crashed_run_stops(self):
        rc, out, err = dump(self.store, "--run", "r-crashed", "--follow")
        self.assertEqual(rc, 0, err)
        self.assertIn("its owner", err)
        self.assertIn("crashed", err)
        self.assertIn("IN DOUBT", out)

    def test_follow_an_ended_run_returns(self):
        rc, out, err = dump(self.store, "--run", "r-suspended", "--follow",
                            "--format", "jsonl")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(jsonl(out)), 2)
        self.assertIn("is suspended", err)


class CrashedEarlyTest(unittest.TestCase):
    """A run killed in its first second: its record, written when the run
    started, may count none of its steps; every listing counts them."""

    def test_steps_are_counted(self):
        tmp = tempfile.mkdtemp(prefix="pl-dump-")
        try:
            store = os.path.join(tmp, "store")
            os.mkdir(store)
            p = subprocess.run([FIXTURE, store, "quit", "q-1"], timeout=120)
            self.assertEqual(p.returncode, -signal.SIGKILL)
            rc, out, err = dump(store, "--run", "q-1", "--format", "jsonl")
            self.assertEqual(rc, 0, err)
            n = len(jsonl(out))
            self.assertGreater(n, 0)
            rc, out, err = dump(store)
            self.assertEqual(rc, 0, err)
            row = out.splitlines()[1].split()
            self.assertEqual(row[0], "q-1")
            self.assertIn("crashed)", row)
            self.assertEqual(row[row.index("crashed)") + 1], str(n))
            for fmt in ("json", "jsonl"):
                rc, out, err = dump(store, "--format", fmt)
                self.assertEqual(rc, 0, err)
                runs = (json.loads(out)["runs"] if fmt == "json"
                        else [json.loads(l) for l in out.splitlines()])
                self.assertEqual([(r["id"], r["crashed"], r["steps"])
                                  for r in runs], [("q-1", True, n)], fmt)
            rc, out, err = dump(store, "--run", "q-1", "--format", "json")
            self.assertEqual(rc, 0, err)
            self.assertEqual(json.loads(out)["run"]["steps"], n)
            rc, out, err = dump(store, "--run", "q-1")
            self.assertEqual(rc, 0, err)
            self.assertRegex(out, r"\n  steps    %d[ \n]" % n)
            if WEB:  # ledger-web's list counts them too
                self.assertEqual(self.web_steps(store, tmp), n)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def web_steps(self, store, tmp):
        """The steps ledger-web's list gives run q-1."""
        import re
        import urllib.request
        with open(os.path.join(tmp, "web.err"), "w+") as err:
            w = subprocess.Popen([WEB, store, "--read-only", "--listen",
                                  "127.0.0.1:0"], stdout=subprocess.PIPE,
                                 stderr=err, text=True)
            try:
                url = re.search(r"http://\S+", w.stdout.readline()).group(0)
                with urllib.request.urlopen(url + "/api/runs",
                                            timeout=30) as r:
                    runs = json.loads(r.read())["runs"]
            finally:
                w.send_signal(signal.SIGTERM)
                w.communicate(timeout=30)
            self.assertEqual(w.returncode, 0)
        self.assertEqual([r["id"] for r in runs], ["q-1"])
        return runs[0]["steps"]


# What dump_fixture's "hostile" runs store (its HOSTILE): a screen cleared,
# a line forged, a bell, DEL and a C1 CSI.
HOSTILE = ("x\x1b[2J\x1b[H\rFAULT run forged: by the store\nok    run "
           "forged\x07 \x7f \x9b31m")
# Bytes that drive a terminal: C0 but the line feed, DEL, and C1 (U+0080 ..
# U+009F, two bytes in UTF-8).
RAW_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def strings(v):
    """Every string in a JSON value."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from strings(x)


class HostileTest(unittest.TestCase):
    """A stored string holding control characters (a failed run's reason,
    an error result's code and message, a prompt, a cancel's reason) is
    printed with each escaped, in text as in JSON: printed raw, ESC [
    rewrote the operator's terminal and a carriage return or a line feed
    forged a line of the output ("FAULT run forged")."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pl-dump-hostile-")
        cls.store = os.path.join(cls.tmp, "store")
        os.mkdir(cls.store)
        subprocess.run([FIXTURE, cls.store, "hostile"], check=True,
                       timeout=120)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def raw(self, *args):
        p = subprocess.run([DUMP, self.store, *args], capture_output=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def inert(self, out, what):
        m = RAW_CONTROL.search(out)
        if m:
            self.fail("%s: a raw control byte %r at %d: %r" % (
                what, m.group(0), m.start(), out[max(0, m.start() - 40):][:80]))
        for line in out.split(b"\n"):
            self.assertFalse(line.startswith((b"FAULT run forged",
                                              b"ok    run forged")),
                             "%s: a forged line: %r" % (what, line))

    def test_text_escapes_every_control_character(self):
        self.inert(self.raw(), "the run list")
        for run in ("h-failed", "h-error", "h-suspended", "h-cancelled"):
            out = self.raw("--run", run, "--full")
            self.inert(out, run)
            self.assertIn(b"x\\x1b[2J\\x1b[H\\rFAULT run forged: by the "
                          b"store\\nok    run forged\\x07 \\x7f \\u009b31m"
                          if run in ("h-failed", "h-cancelled") else
                          b"\\u009b31m", out)
        self.assertIn(b"  code     fixture\\x1b[31m-1\n",
                      self.raw("--run", "h-error"))
        # the event a run waits for may hold a C1 control: the header's
        # status line printed it raw (the list escaped it)
        out = self.raw("--run", "h-waiting")
        self.inert(out, "h-waiting")
        self.assertIn(b"  status   waiting for the event 'go\\u009b2J'\n",
                      out)
        self.inert(self.raw("--verify"), "--verify")

    def test_an_argument_quoted_in_a_message_is_inert(self):
        """An argument a message quotes, holding a byte that is not part of
        well-formed UTF-8 (0x9b, an 8-bit terminal's CSI), shows it as
        \\x9b, as the store's strings are shown: it went through raw; a
        well-formed character goes through as it is."""
        p = subprocess.run([DUMP, self.store, "--since", b"\x9b31m\xe2\x82"],
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b'"\\x9b31m\\xe2\\x82"', p.stderr)
        self.assertNotIn(b"\x9b", p.stderr)
        p = subprocess.run([DUMP, self.store, "--since", "h\u00e9\u20ac"],
                           capture_output=True, timeout=60)
        self.assertIn('"h\u00e9\u20ac"'.encode(), p.stderr)

    def test_json_escapes_del_and_c1_too(self):
        # the run list, a line a run, and a run as one document (indented
        # with tabs and line feeds, the only control bytes it holds raw)
        for args in (("--format", "jsonl"), ("--format", "json"),
                     ("--run", "h-failed", "--format", "json"),
                     ("--run", "h-cancelled", "--format", "json")):
            out = self.raw(*args)
            self.inert(out.replace(b"\n", b"").replace(b"\t", b""),
                       " ".join(args))
            self.assertIn(b"\\u007f \\u009b31m", out)
            docs = ([json.loads(l) for l in out.splitlines()]
                    if "jsonl" in args else [json.loads(out)])
            self.assertTrue(any(HOSTILE in t for d in docs
                                for t in strings(d)),
                            "%s: the reason not read back whole" % (args,))

    def test_ledger_web_answers_escape_del_and_c1(self):
        if not WEB:
            self.skipTest("no ledger-web")
        import urllib.request
        with open(os.path.join(self.tmp, "web.err"), "w+") as err:
            w = subprocess.Popen([WEB, self.store, "--read-only", "--listen",
                                  "127.0.0.1:0"], stdout=subprocess.PIPE,
                                 stderr=err)
            try:
                first = w.stdout.readline()
                self.inert(first, "ledger-web's first line")
                url = re.search(rb"http://\S+", first).group(0).decode()
                for path in ("/api/runs", "/api/runs/h-failed",
                             "/api/runs/h-cancelled"):
                    with urllib.request.urlopen(url + path, timeout=30) as r:
                        out = r.read()
                    self.inert(out, path)
                    self.assertIn(b"\\u007f \\u009b31m", out)
                    self.assertTrue(any(HOSTILE in t for t in
                                        strings(json.loads(out))), path)
            finally:
                w.send_signal(signal.SIGTERM)
                w.communicate(timeout=30)
            self.assertEqual(w.returncode, 0)


if __name__ == "__main__":
    DUMP, FIXTURE = sys.argv[1], sys.argv[2]
    WEB = sys.argv[3] if len(sys.argv) > 3 else None
    unittest.main(argv=sys.argv[:1], verbosity=2)
