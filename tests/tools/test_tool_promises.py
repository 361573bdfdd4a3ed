#!/usr/bin/env python3
"""What docs/tools.md and each tool's --help promise, held against the real
ledger-dump, ledger-replay and ledger-web, on an LMDB store and (with the
argument Pg, under tests/pg_run.sh) on a PostgreSQL schema.

usage: test_tool_promises.py --dump D --replay R --web W --plugin P
                             --helper H --source DIR --crash-plugin C
                             [--bench B] [Pg]

- every flag a tool's parser knows is in its --help, and every flag its
  --help lists is one it takes (pl-bench's too, and its usage errors);
- a store's password (a postgresql:// URI's user part or password=
  parameter) is never printed: not in a message, ledger-replay --json's
  store, ledger-web's first line or /api/session; nor an MCP endpoint's;
- ledger-dump --verify, --stats and --chain refuse a filter (exit 1)
  rather than ignore it; --verify --format jsonl is a line a run;
- --follow follows a run queued for a worker, or waiting for an event,
  until it ends;
- --signal and --cancel of a run that never was say so, exit 2;
- a refused command leaves no --trace file behind;
- ledger-replay --json's "exit" is the process's exit status, its runs
  each named by run_id, --worker's counts in summary;
- what opens the store for reading (ledger-dump, --check, --upgrade
  --dry-run, --prune --dry-run) works on a read-only file system, and on
  PostgreSQL changes no row (ledger-web --read-only neither);
- ledger-replay --json prints its document on a failure before the store
  opens; --schedule-put's is the schedule --schedules lists, a field with
  no value null;
- ledger-replay --worker --retain deletes the runs that ended at least
  its DURATION ago, each leaving a tombstone, and keeps the others;
  --retain-failed gives failed and cancelled runs an age of their own;
- ledger-web stops with SIGTERM, exit 0, no sanitizer's report on its
  stderr (nor on any tool's here);
- ledger-web's actions answer as docs/tools.md's JSON API says: /cancel
  whether the run ended, a waiting run's summary, a refusal not_run, a
  deleted or unknown run as the reads say it; a batch's limit over 100
  refused, not cut; a path asked with the method it does not take 405
  with Allow; a /steps cursor the run has not 400;
- ledger-web given a plugin that crashes while it loads exits 2 with a
  line naming the plugin and the signal, as ledger-replay does.
"""
import argparse
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
import urllib.error
import urllib.request

A = None
PG = os.environ.get("PL_TEST_PG_URI")
SECRET = "s3cret-pw"


def run(*cmd, timeout=60, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                       timeout=timeout, **kw)
    return p.returncode, p.stdout, unreported(p.stderr, cmd[0])


def unreported(err, what):
    """err, failing the test when a sanitizer reported in it (an exit
    status of 1 or 2 expected would hide one)."""
    if re.search(r"Sanitizer|runtime error: ", err):
        raise AssertionError("%s: a sanitizer reported:\n%s" % (what, err))
    return err


def stopped(web, err=None):
    """Stop ledger-web as docs/tools.md says, with SIGTERM: it exits 0 with
    no sanitizer's report.  Its stderr (from the file err, else its pipe)."""
    web.send_signal(signal.SIGTERM)
    text = web.communicate(timeout=30)[1]
    if err:
        err.seek(0)
        text = err.read()
        err.close()
    if web.returncode != 0:
        raise AssertionError("ledger-web stopped by SIGTERM exits %d:\n%s"
                             % (web.returncode, text))
    return unreported(text, "ledger-web")


class Stores:
    """A store of the backend under test: a file in a temporary directory,
    or a schema of its own on the server pg_run.sh started."""
    pg = False

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pl-promises-")
        self.n = 0

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def new_store(self):
        self.n += 1
        if self.pg:
            return "%s&schema=%s_%d" % (PG, self.id().split(".")[-1][5:20],
                                        self.n)
        return os.path.join(self.tmp, "s%d.db" % self.n)

    def replay(self, store, *args, timeout=60):
        return run(A.replay, store, *args, timeout=timeout)

    def ok(self, *cmd):
        rc, out, err = run(*cmd)
        self.assertEqual(rc, 0, (cmd, out, err))
        return out


class Help(unittest.TestCase):
    # flags another program's, cited by a help: ledger-replay --import and
    # jq -r in ledger-dump's, ledger-dump --format in ledger-replay's
    CITED = {"ledger-dump": {"--import", "-r"},
             "ledger-replay": {"--format"}, "ledger-web": set(),
             "pl-bench": set()}
    SOURCES = {"ledger-dump": ["tools/ledger-dump.c"],
               "ledger-replay": ["tools/ledger-replay.c",
                                 "tools/replay_retention.c"],
               "ledger-web": ["tools/web_main.c"],
               "pl-bench": ["bench/bench.c"]}

    def test_an_empty_store_path_is_bad_usage(self):
        """An empty store path is bad usage (exit 1) in every tool:
        ledger-replay and ledger-web gave exit 2 and the engine's message,
        ledger-dump exit 1."""
        for cmd in ([A.dump, ""], [A.replay, "", "--check"],
                    [A.web, "", "--listen", "127.0.0.1:0"]):
            rc, _, err = run(*cmd)
            self.assertEqual(rc, 1, (cmd[0], err))
            self.assertIn("the store path is empty", err, cmd[0])

    def test_replays_help_lists_every_exit_status(self):
        """docs/tools.md's exit statuses of ledger-replay, 3 (--wake, a
        schedule failed) among them, are in its --help too."""
        rc, text, _ = run(A.replay, "--help")
        self.assertEqual(rc, 0)
        codes = re.findall(r"^  ([0-9])  ", text.split("Exit status:")[1],
                           re.M)
        self.assertEqual(codes, ["0", "1", "2", "3", "4", "5"], text)

    def test_help_fits_a_terminal(self):
        """--help's lines are at most 80 columns (pl-bench's ran to 91,
        ledger-replay's to 91)."""
        tools = [("ledger-dump", A.dump), ("ledger-web", A.web),
                 ("ledger-replay", A.replay)]
        if A.bench:
            tools.append(("pl-bench", A.bench))
        for tool, path in tools:
            rc, text, err = run(path, "--help")
            self.assertEqual(rc, 0, tool)
            wide = [line for line in text.splitlines() if len(line) > 80]
            self.assertEqual(wide, [], tool)

    def test_bench_json_says_the_noise(self):
        """--json says what the table says of a noisy floor: each W1
        figure has its floor's probes beside it (and noise, when they
        moved), and a goal not judged is neither met nor missed (met:
        null).  W1 left its probes out, and a goal not judged said met:
        true or false."""
        if not A.bench:
            self.skipTest("built without pl-bench")
        tmp = tempfile.mkdtemp(prefix="pl-promises-bench-json-")
        try:
            rc, out, err = run(A.bench, "--quick", "--json", "--only", "w1",
                               "--dir", tmp, timeout=600)
            self.assertEqual(rc, 0, err)
            doc = json.loads(out)
            noisy = set()
            for fig in doc["w1_sequential"]:
                for k in ("floor_probe_before_us", "floor_probe_after_us",
                          "floor_probe_spread"):
                    self.assertIn(k, fig, fig)
                if "noise" in fig:
                    noisy.add("W1 %s, N=%d:" % (fig["durability"], fig["n"]))
            for goal in doc["goals"]:
                if "not_judged" in goal:
                    self.assertIsNone(goal["met"], goal)
                else:
                    self.assertIn(goal["met"], (True, False), goal)
                # a figure said noisy has its goal not judged
                if any(goal["goal"].startswith(n) for n in noisy):
                    self.assertIn("not_judged", goal)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_bench_usage(self):
        """pl-bench's bad usage is exit 2 and one line of why, before any
        workload runs; a workload --store cannot run is refused."""
        if not A.bench:
            self.skipTest("built without pl-bench")
        for args, words in ((["--bogus"], "unknown option"),
                            (["--only"], "--only needs a value"),
                            (["--only", "w9"], "--only takes workloads"),
                            (["--only", "w1", "--only", "w9"],
                             "--only is given twice"),
                            (["--dir", "/tmp", "--dir", "/tmp", "--only",
                              "w9"], "--dir is given twice"),
                            (["--store", "/tmp/x.db"], "postgresql:// URI"),
                            (["--store", "postgresql://h/db?schema=x"],
                             "without schema="),
                            (["--store", "postgresql://h/db", "--only",
                              "w1,w2"], "LMDB only")):
            rc, out, err = run(A.bench, *args)
            self.assertEqual(rc, 2, (args, out, err))
            self.assertIn(words, err.splitlines()[0], args)
            self.assertNotIn("benchmark", out, args)
        # a server that cannot be had: exit 1, no password said, and no
        # directory left behind in TMPDIR
        tmp = tempfile.mkdtemp(prefix="pl-promises-bench-")
        try:
            rc, out, err = run(
                A.bench, "--quick", "--only", "w1", "--store",
                "postgresql://u:%s@127.0.0.1:1/db?connect_timeout=5" % SECRET,
                env=dict(os.environ, TMPDIR=tmp))
            self.assertEqual(rc, 1, err)
            self.assertIn("cannot connect to postgresql://u:***@", err)
            self.assertNotIn(SECRET, out + err)
            self.assertEqual(os.listdir(tmp), [])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_an_option_of_one_value_given_twice_is_refused(self):
        """A flag that takes one value, given twice, is refused (exit 1,
        "is given twice"), before a store is opened or made: the last
        value does not silently win (--cancel A --cancel B cancelled B
        alone).  --plugin, which is repeatable, still adds each."""
        tmp = tempfile.mkdtemp(prefix="pl-promises-twice-")
        try:
            store = os.path.join(tmp, "s.db")
            cron = ["--cron", "* * * * *"]
            cases = [
                (A.replay, [store, "--cancel", "a", "--cancel", "b"]),
                (A.replay, [store, "--plugin", A.plugin, "--run", "a",
                            "--run", "b"]),
                (A.replay, [store, "--plugin", A.plugin, "--fork", "a",
                            "--at", "0:1", "--at", "0:2"]),
                (A.replay, [store, "--plugin", A.plugin, "--resume", "a",
                            "--resume", "b", "--answer", "{}"]),
                (A.replay, [store, "--signal", "a", "--name", "go",
                            "--name", "stop", "--payload", "{}"]),
                (A.replay, [store, "--prune", "--older-than", "1d",
                            "--older-than", "2d"]),
                (A.replay, [store, "--submit", "p", "--payload", "{}",
                            "--payload", '{"a": 1}']),
                (A.replay, [store, "--schedule-put", "n"] + cron + cron +
                 ["--policy", "p", "--payload", "{}"]),
                (A.replay, [store, "--plugin", A.plugin, "--check",
                            "--trace", os.path.join(tmp, "t1"), "--trace",
                            os.path.join(tmp, "t2")]),
                (A.dump, [store, "--run", "a", "--run", "b"]),
                (A.dump, [store, "--status", "failed", "--status",
                          "completed"]),
                (A.dump, [store, "--format=json", "--format", "text"]),
                (A.web, [store, "--listen", "127.0.0.1:0", "--listen",
                         "127.0.0.1:0"]),
                (A.web, [store, "--stall-timeout", "5",
                         "--stall-timeout=6"])]
            for tool, args in cases:
                rc, out, err = run(tool, *args)
                self.assertEqual(rc, 1, (args, out, err))
                self.assertRegex(err.splitlines()[0],
                                 r"--[a-z-]+ is given twice", args)
                self.assertEqual(os.listdir(tmp), [], args)
            # a repeatable flag stays repeatable
            rc, out, err = run(A.replay, store, "--plugin", A.plugin,
                               "--plugin", "/nonexistent/x.so", "--check")
            self.assertEqual(rc, 2, err)
            self.assertIn("/nonexistent/x.so", err)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_every_flag_listed_and_taken(self):
        tools = [("ledger-dump", A.dump), ("ledger-replay", A.replay),
                 ("ledger-web", A.web)]
        if A.bench:
            tools.append(("pl-bench", A.bench))
        for tool, path in tools:
            rc, text, err = run(path, "--help")
            self.assertEqual((rc, err), (0, ""), tool)
            listed = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", text))
            source = "".join(open(os.path.join(A.source, f)).read()
                             for f in self.SOURCES[tool])
            known = set(re.findall(r'"(--?[a-z][a-z-]*)"', source))
            self.assertEqual(sorted(known - listed), [],
                             "%s takes these, --help does not list them"
                             % tool)
            # each alone: with no store nothing runs; pl-bench, which
            # needs none, is stopped by a workload that is none
            stop = ["--only", "none"] if tool == "pl-bench" else []
            for flag in sorted(listed - self.CITED[tool] - {"-h", "--help"}):
                rc, _, err = run(path, flag, *stop)
                self.assertIn(rc, (1, 2), (tool, flag, err))
                self.assertNotRegex(err, "unknown option [\"']%s[\"']" % flag,
                                    "%s --help lists %s" % (tool, flag))


class Secrets(Stores, unittest.TestCase):
    """A server that cannot be reached: the message names the store, with
    its password masked."""

    def test_no_password_in_a_message(self):
        uri = ("postgresql://alice:%s@127.0.0.1:1/db?connect_timeout=5"
               "&password=%s" % (SECRET, SECRET))
        for cmd in ([A.dump, uri], [A.replay, uri, "--plugin", A.plugin,
                                    "--check", "--json"],
                    [A.replay, uri, "--cancel", "x"],
                    [A.replay, uri, "stray", "--check"],
                    [A.web, uri, "--listen", "127.0.0.1:0"]):
            rc, out, err = run(*cmd)
            self.assertIn(rc, (1, 2), (cmd, err))
            self.assertNotIn(SECRET, out + err, cmd[0])
            self.assertIn("alice:***@127.0.0.1:1", err, cmd[0])
            self.assertIn("password=***", err, cmd[0])
        # its name percent-encoded (libpq decodes it), sslpassword=, and a
        # URI libpq refuses, whose message quotes the part it refused
        for q in ("%%70assword=%s" % SECRET, "sslpassword=%s" % SECRET,
                  "pass%%77ord=%s%%zz" % SECRET, "password=%s=x" % SECRET):
            uri = "postgresql://127.0.0.1:1/db?connect_timeout=5&" + q
            for cmd in ([A.dump, uri], [A.replay, uri, "--prune",
                                        "--older-than", "1d", "--json"]):
                rc, out, err = run(*cmd)
                self.assertIn(rc, (1, 2), (cmd, err))
                self.assertNotIn(SECRET, out + err, (q, cmd[0]))
                self.assertIn("=***", out + err, (q, cmd[0]))
        # an MCP endpoint's password, when it cannot be reached
        rc, out, err = self.replay(
            self.new_store(), "--mcp",
            "fs=http://bob:%s@127.0.0.1:1/mcp" % SECRET, "--check")
        self.assertEqual(rc, 2, err)
        self.assertNotIn(SECRET, out + err)


class Dump(Stores, unittest.TestCase):
    def test_verify_stats_chain_refuse_a_filter(self):
        if self.pg:
            self.skipTest("refused before the store is opened: LMDB's says")
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        filters = (["--status", "failed"], ["--policy", "approval"],
                   ["--since", "2h"], ["--type", "text"], ["--actor", "x"],
                   ["--invocation", "0"], ["--full"])
        for mode in (["--verify"], ["--stats"], ["--chain", "--run", "ap-1"],
                     ["--verify", "--run", "ap-1"]):
            self.ok(A.dump, store, *mode)
            for f in filters:
                if "--run" not in mode and f[0] in ("--type", "--actor",
                                                    "--invocation", "--full"):
                    f = f + ["--run", "ap-1"]
                rc, out, err = run(A.dump, store, *mode, *f)
                self.assertEqual(rc, 1, (mode, f, out, err))
                self.assertEqual(out, "")
        rc, _, err = run(A.dump, store, "--verify", "--chain", "--run", "ap-1")
        self.assertEqual(rc, 1, err)

    def test_verify_and_stats_formats(self):
        """--verify's jsonl is a line a run checked, as its text; its json
        and --stats's the documents scripts read."""
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        self.ok(A.replay, store, "--plugin", A.plugin, "--submit", "note",
                "--payload", "{}", "--new-id", "q-1")
        lines = [json.loads(x) for x in self.ok(
            A.dump, store, "--verify", "--format", "jsonl").splitlines()]
        self.assertEqual(lines, [{"run": "ap-1", "ok": True},
                                 {"run": "q-1", "ok": True}])
        doc = json.loads(self.ok(A.dump, store, "--verify", "--format",
                                 "json"))
        self.assertEqual(doc, {"runs_checked": 2, "fault_count": 0,
                               "faults": []})
        stats = json.loads(self.ok(A.dump, store, "--stats", "--format",
                                   "json"))
        self.assertEqual(stats["runs"], 2)
        self.assertEqual(stats["by_status"]["suspended"], 1)
        self.assertEqual(stats["by_status"]["submitted"], 1)
        self.assertEqual(sum(stats["by_status"].values()), 2)
        self.assertEqual(sorted(r["id"] for r in stats["largest"]),
                         ["ap-1", "q-1"])

    def follow(self, store, run_id, then):
        """--follow on run_id, started, then `then` run; the follower's
        output, errors and exit status."""
        f = subprocess.Popen([A.dump, store, "--run", run_id, "--follow",
                              "--format", "jsonl"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)  # it has read the run as it is
            if f.poll() is not None:
                self.fail("--follow stopped at once: " + f.stderr.read())
            self.ok(*then)
            out, err = f.communicate(timeout=30)
        finally:
            if f.poll() is None:
                f.kill()
                f.wait()
        return f.returncode, out, err

    def test_follow_a_submitted_run(self):
        store = self.new_store()
        self.ok(A.replay, store, "--plugin", A.plugin, "--submit", "note",
                "--payload", '{"text":"hi"}', "--new-id", "q-1")
        rc, out, err = self.follow(store, "q-1", [A.replay, store, "--plugin",
                                                  A.plugin, "--run", "q-1"])
        self.assertEqual(rc, 0, err)
        steps = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(steps[-1]["payload"], {"noted": "hi"})
        self.assertIn('run "q-1" is completed', err)

    def test_follow_a_waiting_run(self):
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "await", "aw-1", "{}")
        rc, out, err = self.follow(store, "aw-1", [
            A.replay, store, "--plugin", A.plugin, "--signal", "aw-1",
            "--name", "go", "--payload", '{"n": 1}'])
        self.assertEqual(rc, 0, err)
        steps = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(steps[-1]["payload"], {"got": {"n": 1}})
        self.assertIn('run "aw-1" is completed', err)


class Replay(Stores, unittest.TestCase):
    def test_signal_or_cancel_of_no_run(self):
        store = self.new_store()
        self.ok(A.replay, store, "--plugin", A.plugin, "--submit", "note",
                "--payload", "{}", "--new-id", "q-1")
        for args in (["--cancel", "nope"],
                     ["--signal", "nope", "--name", "go", "--payload", "{}"]):
            rc, out, err = self.replay(store, *args)
            self.assertEqual(rc, 2, err)
            self.assertIn("no run 'nope'", err)
            self.assertNotIn("tombstone", err)

    def test_import_from_an_endless_stdin_is_refused(self):
        """--import - checks the export as it reads stdin: a stream that
        never ends (a wrong pipe) is refused at its first bad line, exit 1,
        no store made, instead of being copied to a temporary file until
        the disk is full."""
        store = self.new_store()
        for stream in ("/dev/zero", None):
            if stream:
                src = open(stream, "rb")
            else:  # lines that never end, none of them an export's
                src = subprocess.Popen(["yes", "{\"kind\": \"step\"}"],
                                       stdout=subprocess.PIPE)
            try:
                p = subprocess.run([A.replay, store, "--import", "-"],
                                   stdin=src if stream else src.stdout,
                                   capture_output=True, text=True,
                                   timeout=60)
            finally:
                if stream:
                    src.close()
                else:
                    src.kill()
                    src.wait()
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("cannot import", p.stderr)
            rc, _, err = run(A.dump, store)
            self.assertEqual(rc, 2, err)

    def test_json_is_utf8_whatever_the_store_holds(self):
        """A payload's string need not be UTF-8 (cJSON keeps its bytes, the
        store too); every JSON the tools print is, a byte that is not as
        U+FFFD, and an export so printed imports to the same records."""
        store, other = self.new_store(), self.new_store()
        raw = os.fsdecode(b'{"order": "o-\xff\xfe", "k\xc3": 1}')
        self.ok(A.replay, store, "--plugin", A.plugin, "--submit",
                "approval", "--payload", raw, "--new-id", "u-1")

        def utf8_json(rc_want, *cmd):
            p = subprocess.run([os.fsencode(str(c)) for c in cmd],
                               capture_output=True, timeout=60)
            self.assertEqual(p.returncode, rc_want, (cmd, p.stderr))
            text = p.stdout.decode("utf-8")  # strict: raises on a bad byte
            return [json.loads(l) for l in text.splitlines()] \
                if "jsonl" in cmd else json.loads(text)

        doc = utf8_json(4, A.replay, store, "--plugin", A.plugin, "--run",
                        "u-1", "--json")
        self.assertEqual(doc["runs"][0]["prompt"]["order"], "o-\ufffd\ufffd")
        utf8_json(0, A.dump, store, "--format", "json")
        utf8_json(0, A.dump, store, "--format", "jsonl")
        utf8_json(0, A.dump, store, "--run", "u-1", "--format", "json")
        lines = utf8_json(0, A.dump, store, "--run", "u-1", "--format",
                          "jsonl")
        self.assertEqual(lines[0]["payload"], {"order": "o-\ufffd\ufffd",
                                               "k\ufffd": 1})
        export = os.path.join(self.tmp, "u-1.jsonl")
        with open(export, "w") as f:
            f.write(self.ok(A.dump, store, "--run", "u-1", "--format",
                            "jsonl"))
        self.ok(A.replay, other, "--import", export)
        self.assertEqual(self.ok(A.helper, "head", other, "u-1"),
                         self.ok(A.helper, "head", store, "u-1"))

    def ids(self, store):
        out = self.ok(A.dump, store, "--format", "jsonl")
        return {json.loads(line)["id"] for line in out.splitlines()}

    def status(self, store, run_id):
        """Run run_id's status as ledger-dump gives it; None for none."""
        rc, out, _ = run(A.dump, store, "--run", run_id, "--format", "json")
        return json.loads(out)["run"]["status"] if rc == 0 else None

    def worker(self, store, until, *args):
        """A worker, stopped (SIGTERM) once until() holds: it exits 0;
        its stdout."""
        w = subprocess.Popen([A.replay, store, "--plugin", A.plugin,
                              "--worker", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(1200):
                if until():
                    break
                time.sleep(0.05)
        finally:
            w.send_signal(signal.SIGTERM)
            out, err = w.communicate(timeout=60)
        self.assertEqual(w.returncode, 0, err)
        self.assertTrue(until(), "the worker never got there: " + err)
        return out

    def test_worker_retain_deletes_what_its_rule_says(self):
        """--worker --retain DURATION deletes the runs that ended at least
        DURATION ago, each leaving its tombstone (the id not taken again),
        and keeps the runs that ended since and those that have not;
        --retain-failed DURATION is the age of failed and cancelled runs
        instead."""
        store = self.new_store()
        p = ["--plugin", A.plugin]
        self.ok(A.replay, store, *p, "--submit", "note", "--payload",
                '{"text":"a"}', "--new-id", "n-1")
        self.ok(A.replay, store, *p, "--run", "n-1")
        for run_id in ("ap-1", "ap-2"):
            self.ok(A.helper, "start", store, A.plugin, "approval", run_id,
                    "{}")
        self.replay(store, "--cancel", "ap-2")  # suspended: cancelled
        self.ok(A.helper, "start", store, A.plugin, "await", "aw-1", "{}")
        self.ok(A.replay, store, *p, "--submit", "note", "--payload",
                '{"text":"b"}', "--new-id", "q-1")
        status = lambda run_id: self.status(store, run_id)
        self.assertEqual([status(r) for r in ("n-1", "ap-2", "ap-1", "aw-1")],
                         ["completed", "cancelled", "suspended", "waiting"])
        everyone = {"n-1", "ap-1", "ap-2", "aw-1", "q-1"}
        # an hour's rule: its first pass comes before the worker takes q-1,
        # and deletes nothing that ended since
        self.worker(store, lambda: status("q-1") == "completed",
                    "--retain", "1h")
        self.assertEqual(self.ids(store), everyone)
        time.sleep(1.1)  # every ended run is a second old at least
        # --retain-failed: the cancelled run is kept an hour, the completed
        # ones go
        self.worker(store, lambda: not self.ids(store) & {"n-1", "q-1"},
                    "--retain", "1s", "--retain-failed", "1h")
        self.assertEqual(self.ids(store), {"ap-1", "ap-2", "aw-1"})
        # past its own age it goes, whatever the completed runs' rule says
        self.worker(store, lambda: "ap-2" not in self.ids(store),
                    "--retain", "1h", "--retain-failed", "1s")
        self.assertEqual(self.ids(store), {"ap-1", "aw-1"})
        for run_id, was in (("n-1", "completed"), ("ap-2", "cancelled"),
                            ("q-1", "completed")):
            rc, _, err = run(A.dump, store, "--run", run_id)
            self.assertEqual(rc, 2, err)
            self.assertIn("was deleted on", err)
            self.assertIn("it was %s" % was, err)
        rc, _, err = self.replay(store, *p, "--submit", "note", "--payload",
                                 "{}", "--new-id", "n-1")
        self.assertNotEqual(rc, 0, err)
        self.assertIn("deleted", err)
        self.assertEqual([status(r) for r in ("ap-1", "aw-1")],
                         ["suspended", "waiting"])

    def test_worker_json(self):
        """--worker --json: stopped by SIGTERM, exit 0, one document on
        stdout with its counts in summary, each end apart (waiting was
        counted as suspended, cancelled as failed); runs holds runs
        only."""
        store = self.new_store()
        for policy, payload, run_id in (("note", '{"text":"w"}', "w-1"),
                                        ("approval", "{}", "w-2"),
                                        ("await", "{}", "w-3"),
                                        ("approval", '{"fail":true}', "w-4")):
            self.ok(A.replay, store, "--plugin", A.plugin, "--submit",
                    policy, "--payload", payload, "--new-id", run_id)
        # a waiting run, cancelled where its plugin is not loaded: the
        # worker ends it
        self.ok(A.helper, "start", store, A.plugin, "await", "w-5", "{}")
        self.ok(A.replay, store, "--cancel", "w-5")
        want = ["completed", "suspended", "waiting", "failed", "cancelled"]
        runs = ["w-%d" % i for i in range(1, 6)]
        out = self.worker(store, lambda: [self.status(store, r)
                                          for r in runs] == want, "--json")
        doc = json.loads(out)
        self.assertEqual((doc["mode"], doc["exit"], doc["runs"]),
                         ("worker", 0, []))
        self.assertEqual(doc["summary"], {
            "completed": 1, "suspended": 1, "waiting": 1, "failed": 1,
            "cancelled": 1, "not_executed": 0})

    def test_readers_on_a_read_only_file_system(self):
        """What writes nothing opens the store read-only, so a store on a
        read-only file system (a read-only bind mount in a mount namespace
        of its own: root and unshare(1)) serves it."""
        if self.pg:
            self.skipTest("a file system is LMDB's")
        if (shutil.which("unshare") is None or subprocess.run(
                ["unshare", "-m", "true"], capture_output=True).returncode):
            self.skipTest("no mount namespace to be had")
        store = self.new_store()
        self.ok(A.replay, store, "--plugin", A.plugin, "--submit", "note",
                "--payload", '{"text":"a"}', "--new-id", "n-1")
        self.ok(A.replay, store, "--plugin", A.plugin, "--run", "n-1")
        script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
                  '&& touch "$1/probe" 2>/dev/null && exit 9; shift; '
                  'exec "$@"')
        p = ["--plugin", A.plugin]
        for cmd in ([A.dump, store, "--verify"],
                    [A.replay, store, *p, "--check"],
                    [A.replay, store, *p, "--upgrade", "--all-diverged",
                     "--dry-run"],
                    [A.replay, store, "--prune", "--older-than", "0s",
                     "--dry-run"]):
            rc, out, err = run("unshare", "-m", "sh", "-c", script, "sh",
                               self.tmp, *cmd)
            self.assertEqual(rc, 0, (cmd[2:], out, err))
        self.assertIn("would delete n-1", out)
        rc, _, err = run("unshare", "-m", "sh", "-c", script, "sh", self.tmp,
                         A.replay, store, "--prune", "--older-than", "0s")
        self.assertEqual(rc, 2, err)  # a prune that deletes cannot
        self.assertIn("read-only", err)

    def test_a_refused_command_makes_no_trace_file(self):
        """--trace FILE is made by a command that runs, and by none that
        is refused (a missing store, no such run); one that was there
        stays."""
        store = self.new_store()
        p = ["--plugin", A.plugin]
        trace = os.path.join(self.tmp, "trace.jsonl")
        for missing in (self.new_store(), store):
            rc, _, err = self.replay(missing, *p, "--run", "nope", "--trace",
                                     trace)
            self.assertEqual(rc, 2, err)
            self.assertFalse(os.path.exists(trace), missing)
            if missing != store:  # then make it, for the second
                self.ok(A.replay, store, *p, "--submit", "note", "--payload",
                        '{"text":"t"}', "--new-id", "t-1")
        open(trace, "w").close()
        rc, _, err = self.replay(store, *p, "--run", "nope", "--trace", trace)
        self.assertEqual((rc, os.path.getsize(trace)), (2, 0), err)
        os.unlink(trace)
        self.ok(A.replay, store, *p, "--run", "t-1", "--trace", trace)
        events = [json.loads(x)["event"] for x in open(trace)]
        self.assertIn("run_completed", events)

    def test_json_exit_is_the_exit_status(self):
        store = self.new_store()
        p = ["--plugin", A.plugin]
        cases = [
            (0, p + ["--submit", "note", "--payload", '{"text":"a"}',
                     "--new-id", "n-1"]),
            (0, p + ["--run", "n-1"]),
            (2, p + ["--run", "nope"]),
            (0, p + ["--check"]),
            (1, p + ["--resume", "n-1", "--answer", "{}"]),
            (0, p + ["--submit", "approval", "--payload", "{}", "--new-id",
                     "ap-1"]),
            (4, p + ["--run", "ap-1"]),
            (5, ["--cancel", "ap-1"]),
            (1, ["--cancel", "ap-1"]),
            (2, ["--schedule-delete", "none"]),
            (0, ["--prune", "--older-than", "0s", "--dry-run"]),
        ]
        for want, args in cases:
            rc, out, err = self.replay(store, *args, "--json")
            self.assertEqual(rc, want, (args, err))
            doc = json.loads(out)
            self.assertEqual(doc["exit"], rc, args)
            self.assertLessEqual({"exit", "mode", "runs", "skipped"},
                                 set(doc), args)
            if rc in (1, 2):  # refused: why, as stderr said it
                self.assertIn("message", doc, args)
            else:
                self.assertNotIn("message", doc, args)
            self.assertIsInstance(doc["runs"], list)
            for r in doc["runs"]:  # each run's summary names it alike
                self.assertIn("run_id", r, args)


    def test_json_document_on_a_failure_before_the_open(self):
        """--json prints its document however early the command fails
        (bad usage, a plugin that cannot be loaded, no store, a refused
        import): its exit, the message said, and the library's status
        where one says why."""
        store = self.new_store()
        bad = os.path.join(self.tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"kind":"run","format":2}\n')
        for want, error, mode, args in (
                (2, "PL_ENOTFOUND", "check",
                 ["--plugin", self.tmp + "/none.so", "--check"]),
                (2, "PL_ENOTFOUND", "check", ["--plugin", A.plugin,
                                              "--check"]),
                (2, "PL_ENOTFOUND", "cancel", ["--cancel", "x"]),
                (1, "PL_EJSON", "import", ["--import", bad]),
                (1, None, "none", ["--bogus"])):
            rc, out, err = self.replay(store, *args, "--json")
            self.assertEqual(rc, want, (args, err))
            doc = json.loads(out)
            self.assertEqual((doc["mode"], doc["exit"], doc["runs"],
                              doc["skipped"], doc.get("error")),
                             (mode, rc, [], [], error), args)
            self.assertEqual("%s: %s\n" % (os.path.basename(A.replay),
                                            doc["message"]),
                             err.splitlines(True)[0], args)

    def test_all_last_line_as_tools_md_shows_it(self):
        """--all's last line, in docs/tools.md's example of an order
        finished after a crash, is the one the tool prints (the counts
        aside)."""
        store = self.new_store()
        p = ["--plugin", A.plugin]
        self.ok(A.replay, store, *p, "--submit", "note", "--payload",
                '{"text":"a"}', "--new-id", "n-1")
        last = self.ok(A.replay, store, *p, "--all").splitlines()[-1]
        shape = re.sub(r"\d+", "N", last)
        with open(os.path.join(A.source, "docs", "tools.md")) as f:
            doc = f.read()
        shown = re.findall(r"^\d+ crashed run\(s\) continued.*$", doc, re.M)
        self.assertTrue(shown, "tools.md shows no --all last line")
        for line in shown:
            self.assertEqual(re.sub(r"\d+", "N", line), shape, last)

    def test_a_lost_output_names_the_runs_made(self):
        """Output that cannot be written (a full disk) is exit 2, and what
        was lost is said on stderr: the runs --submit queued and --fork
        made, whose ids went nowhere else, so that a retry does not queue
        or fork again blindly."""
        store = self.new_store()
        p = ["--plugin", A.plugin]
        self.ok(A.replay, store, *p, "--submit", "note", "--payload",
                '{"text":"a"}', "--new-id", "n-1")
        self.ok(A.replay, store, *p, "--run", "n-1")
        for args in (["--submit", "note", "--payload", '{"text":"b"}'],
                     ["--fork", "n-1", "--at", "0:0"],
                     ["--fork", "n-1", "--at", "0:0", "--json"]):
            before = set(self.runs_of(store))
            with open("/dev/full", "w") as full:
                q = subprocess.run([A.replay, store, *p, *args], stdout=full,
                                   stderr=subprocess.PIPE, text=True,
                                   timeout=60)
            err = unreported(q.stderr, A.replay)
            made = set(self.runs_of(store)) - before
            self.assertEqual((q.returncode, len(made)), (2, 1), (args, err))
            self.assertIn("cannot write the output", err, args)
            self.assertIn(made.pop(), err, (args, err))

    def runs_of(self, store):
        out = self.ok(A.dump, store, "--format", "jsonl")
        return [json.loads(line)["id"] for line in out.splitlines()]

    def test_json_error_of_a_refused_run(self):
        """--json's error is the library's status of a refusal once the
        store is open too (no such run, a deleted one, a fork step that is
        not there, a new id taken, an import whose id is taken), as stderr
        names it."""
        store = self.new_store()
        p = ["--plugin", A.plugin]
        for run_id in ("gone", "n-1"):
            self.ok(A.replay, store, *p, "--submit", "note", "--payload",
                    '{"text":"a"}', "--new-id", run_id)
            self.ok(A.replay, store, *p, "--run", run_id)
            if run_id == "gone":
                self.ok(A.replay, store, "--prune", "--older-than", "0s")
        export = os.path.join(self.tmp, "n-1.jsonl")
        with open(export, "w") as f:
            f.write(self.ok(A.dump, store, "--run", "n-1", "--format",
                            "jsonl"))
        for want, error, args in (
                (2, "PL_ENOTFOUND", p + ["--run", "nope"]),
                (2, "PL_ENOTFOUND", p + ["--check", "--run", "nope"]),
                (2, "PL_ENOTFOUND", p + ["--fork", "nope", "--at", "0:0"]),
                (2, "PL_ENOTFOUND", p + ["--run", "gone"]),
                (1, "PL_ENOTFOUND", p + ["--fork", "n-1", "--at", "0:99"]),
                (1, "PL_EEXIST", p + ["--fork", "n-1", "--at", "0:0",
                                      "--new-id", "n-1"]),
                (1, "PL_EEXIST", ["--import", export])):
            rc, out, err = self.replay(store, *args, "--json")
            self.assertEqual(rc, want, (args, err))
            doc = json.loads(out)
            self.assertEqual((doc["exit"], doc["runs"], doc.get("error")),
                             (rc, [], error), (args, err))
            self.assertEqual("%s: %s\n" % (os.path.basename(A.replay),
                                            doc["message"]),
                             err.splitlines(True)[0], args)

    def test_schedule_put_json(self):
        """--schedule-put --json: the schedule as --schedules gives it, in
        its own member; runs holds runs only; no last run is null."""
        store = self.new_store()
        rc, out, err = self.replay(store, "--schedule-put", "tick", "--cron",
                                   "0 3 * * *", "--policy", "note",
                                   "--payload", '{"a":1}', "--json")
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual((doc["runs"], doc["exit"]), ([], 0))
        listed = json.loads(self.ok(A.dump, store, "--schedules", "--format",
                                    "json"))["schedules"]
        self.assertEqual([doc["schedule"]], listed)
        self.assertEqual((listed[0]["name"], listed[0]["payload"],
                          listed[0]["last_run"]), ("tick", {"a": 1}, None))


class Web(Stores, unittest.TestCase):
    """ledger-web's JSON API as docs/tools.md gives it."""

    def web(self, store, *args):
        # stderr to a file: a pipe nobody reads could fill and stop it
        err = tempfile.TemporaryFile(mode="w+")
        w = subprocess.Popen([A.web, store, "--listen", "127.0.0.1:0", *args],
                             stdout=subprocess.PIPE, stderr=err, text=True)
        self.addCleanup(stopped, w, err)
        url = re.search(r"http://\S+", w.stdout.readline()).group(0)
        csrf = self.api(url, "/api/session")[1]["csrf"]
        return url, csrf

    def api(self, url, path, body=None, csrf=None):
        """(HTTP status, JSON answer) of a GET, or of a POST with body."""
        req = urllib.request.Request(
            url + path, method="GET" if body is None else "POST",
            data=None if body is None else body.encode(),
            headers={"X-CSRF-Token": csrf} if csrf else {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_listen_takes_an_address(self):
        """--listen HOST:PORT whose HOST is a name (ledger-web binds IP
        addresses and localhost) is a bad value: exit 1, saying so, before
        the store is opened; it was exit 2 ("cannot serve") once the store
        was open, or "without a token" without one."""
        tmp = tempfile.mkdtemp(prefix="pl-promises-listen-")
        try:
            store = os.path.join(tmp, "none.db")  # never opened
            env = dict(os.environ, PL_WEB_TOKEN="0123456789abcdef0123")
            none = dict(os.environ)
            none.pop("PL_WEB_TOKEN", None)
            for name, e in (("example.com", env), ("localhost.", env),
                            ("example.com", none)):
                rc, out, err = run(A.web, store, "--listen", name + ":8080",
                                   env=e)
                self.assertEqual(rc, 1, (name, err))
                self.assertIn("--listen", err.splitlines()[0], name)
                self.assertIn("IP address", err.splitlines()[0], name)
                self.assertEqual(os.listdir(tmp), [], name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_a_plugin_that_crashes_while_loading(self):
        """A plugin is trusted code; one that dies in pl_plugin_init takes
        ledger-web down as it does ledger-replay: exit 2 and a line naming
        it and the signal, before the store is opened."""
        store = self.new_store()
        self.ok(A.replay, store, "--plugin", A.plugin, "--submit", "approval",
                "--payload", "{}")
        for tool in (A.web, A.replay):
            extra = ["--listen", "127.0.0.1:0"] if tool == A.web else \
                ["--all"]
            rc, out, err = run(tool, store, "--plugin", A.plugin, "--plugin",
                               A.crash_plugin, *extra)
            self.assertEqual(rc, 2, (tool, out, err))
            self.assertIn(os.path.basename(A.crash_plugin), err)
            self.assertIn("SIGSEGV", err)
            self.assertIn("pl_plugin_init", err)

    def test_a_successors_id_is_a_run_id(self):
        """A run continued as new goes on as <id>~1 (docs/design.md §12.2): the
        tools take such an id as any other, in ledger-replay --new-id, the
        API's run paths and a page's cursor that ends on one."""
        store = self.new_store()
        for rid in ("o~1", "o~2"):
            self.ok(A.replay, store, "--plugin", A.plugin, "--submit", "note",
                    "--payload", "{}", "--new-id", rid)
        url, _ = self.web(store)
        code, j = self.api(url, "/api/runs/o~1")
        self.assertEqual((code, j.get("run", {}).get("id")), (200, "o~1"), j)
        code, j = self.api(url, "/api/runs?order=asc&limit=1")
        self.assertEqual((code, j.get("next_cursor")), (200, "o~1"), j)
        code, j = self.api(url, "/api/runs?order=asc&limit=1&cursor=o~1")
        self.assertEqual((code, [r["id"] for r in j.get("runs", [])]),
                         (200, ["o~2"]), j)

    def test_cancel_says_whether_the_run_ended(self):
        """/cancel's answer says `ended`: a suspended run is cancelled at
        once; a waiting one whose policies the server has not loaded is
        only marked; a run that has ended is 409."""
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        for run in ("aw-1", "aw-2"):
            self.ok(A.helper, "start", store, A.plugin, "await", run, "{}")
        url, csrf = self.web(store)
        for run, now, ended in (("ap-1", "cancelled", True),
                                ("aw-1", "waiting", False)):
            code, j = self.api(url, "/api/runs/%s/cancel" % run,
                               '{"reason": "r"}', csrf)
            self.assertEqual((code, j["run_id"], j["status"], j["now"],
                              j["ended"]), (200, run, "delivered", now,
                                            ended), j)
        code, j = self.api(url, "/api/runs/ap-1/cancel", "", csrf)
        self.assertEqual((code, j["error"]), (409, "PL_ESTATE"), j)
        # with its plugin loaded, a waiting run is continued to its end
        url, csrf = self.web(store, "--plugin", A.plugin)
        code, j = self.api(url, "/api/runs/aw-2/cancel", "", csrf)
        self.assertEqual((code, j["now"], j["ended"]),
                         (200, "cancelled", True), j)


    def test_reads_have_their_documented_fields(self):
        """/api/runs/ID and /timeline have every member docs/tools.md
        lists, `tokens` too (zeros for a run that made no model call, as
        the list gives them)."""
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        url, _ = self.web(store)
        code, doc = self.api(url, "/api/runs/ap-1")
        self.assertEqual(code, 200, doc)
        self.assertLessEqual({"run", "steps", "next", "limit", "payload_cap"},
                             set(doc))
        self.assertLessEqual({"root_policy", "state", "tokens", "in_doubt",
                              "in_doubt_calls", "error_results",
                              "steps_scanned", "scan_truncated"},
                             set(doc["run"]))
        zeros = {"input": 0, "output": 0, "model_calls": 0}
        self.assertEqual(doc["run"]["tokens"], zeros)
        code, tl = self.api(url, "/api/runs/ap-1/timeline")
        self.assertEqual(set(tl), {"run", "state", "start_us", "end_us",
                                   "tokens", "steps_read", "truncated",
                                   "calls"})
        self.assertEqual(tl["tokens"], zeros)
        listed = self.api(url, "/api/runs")[1]["runs"]
        self.assertEqual([r["tokens"] for r in listed], [zeros])

    def test_actions_answer_as_documented(self):
        """An action's answer is the run's summary as ledger-replay --json
        gives it (a waiting run: where and for what, null for none); a
        refusal is {run_id, status: "not_run", error, message} (an
        upgrade of a run that replays is one); a run not
        there is said as the reads say it: deleted (its tombstone) or
        not_found, whatever the action."""
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "await", "aw-1", "{}")
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        self.ok(A.replay, store, "--plugin", A.plugin, "--submit", "note",
                "--payload", '{"text":"a"}', "--new-id", "n-1")
        self.ok(A.replay, store, "--plugin", A.plugin, "--run", "n-1")
        url, csrf = self.web(store, "--plugin", A.plugin)
        code, j = self.api(url, "/api/runs/aw-1/signal", '{"name": "no"}',
                           csrf)
        self.assertEqual(code, 200, j)
        self.assertEqual({k: j[k] for k in ("status", "waiting_path",
                                            "wake_ms", "wait_event")},
                         {"status": "waiting", "waiting_path": "0",
                          "wake_ms": None, "wait_event": "go"})
        self.assertNotIn("error", j)
        rc, out, err = self.replay(store, "--plugin", A.plugin, "--run",
                                   "aw-1", "--json")
        self.assertEqual(rc, 4, err)
        self.assertEqual({k: v for k, v in json.loads(out)["runs"][0].items()
                          if k in j and k not in ("note", "elapsed_ms",
                                                  "steps_replayed",
                                                  "calls_served")},
                         {k: v for k, v in j.items()
                          if k not in ("note", "elapsed_ms",
                                       "steps_replayed", "calls_served")})
        # an upgrade of a run the loaded code replays is refused, as
        # ledger-replay --upgrade ID refuses it: the run stays as it was
        code, j = self.api(url, "/api/runs/ap-1/upgrade", '{"at": "0:1"}',
                           csrf)
        self.assertEqual((code, j["error"], j["status"]),
                         (409, "not_needed", "not_run"), j)
        self.assertEqual(self.api(url, "/api/runs/ap-1")[1]["run"]["status"],
                         "suspended")
        code, j = self.api(url, "/api/runs/aw-1/delete", "", csrf)
        self.assertEqual((code, j["status"], j["error"], j["run_id"]),
                         (409, "not_run", "PL_ESTATE", "aw-1"), j)
        self.assertEqual(self.api(url, "/api/runs/n-1/delete", "", csrf),
                         (200, {"run_id": "n-1", "deleted": True}))
        for action, body in (("continue", ""), ("cancel", ""),
                             ("signal", '{"name": "go"}'), ("delete", ""),
                             ("fork", '{"at": "0:0"}'), ("verify", "")):
            for run, error in (("n-1", "deleted"), ("never", "not_found")):
                code, j = self.api(url, "/api/runs/%s/%s" % (run, action),
                                   body, csrf)
                self.assertEqual((code, j["error"], j["status"],
                                  j["run_id"], "tombstone" in j),
                                 (404, error, "not_run", run,
                                  error == "deleted"), (action, j))

    def test_an_upgrade_whose_check_fails_writes_nothing(self):
        """/upgrade checks the run first, as ledger-replay --upgrade does,
        and goes on only for a divergence: a check that cannot be made
        (here its policy is not loaded) refuses the upgrade with the
        check's error, the run left as it was and no run made.  It was
        taken for a divergence: the run was forked, ended superseded by
        a new run that could not run, and the answer was a refusal."""
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        url, csrf = self.web(store)  # no --plugin
        code, j = self.api(url, "/api/runs/ap-1/upgrade", '{"at": "0:1"}',
                           csrf)
        self.assertEqual((code, j["run_id"], j["status"], j["error"]),
                         (404, "ap-1", "not_run", "PL_ENOTFOUND"), j)
        self.assertIn("not registered", j["message"])
        self.assertNotIn("new_run", j)
        runs = self.api(url, "/api/runs")[1]["runs"]
        self.assertEqual([(r["id"], r["status"]) for r in runs],
                         [("ap-1", "suspended")])

    def raw(self, url, path, method, csrf):
        """(HTTP status, headers, JSON answer) of a request by method."""
        req = urllib.request.Request(
            url + path, method=method,
            data=b"{}" if method == "POST" else None,
            headers={"X-CSRF-Token": csrf})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.headers, json.loads(e.read())

    def test_a_path_answers_the_method_it_does_not_take_with_405(self):
        """Every route: a POST on a read path and a GET on an action path
        are 405 with the methods it takes in Allow and the JSON error."""
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        url, csrf = self.web(store)
        reads = ["/api/session", "/api/runs", "/api/overview", "/api/inbox",
                 "/api/events", "/api/runs/ap-1", "/api/runs/ap-1/steps",
                 "/api/runs/ap-1/step?id=0:0", "/api/runs/ap-1/timeline",
                 "/api/runs/ap-1/export"]
        actions = ["/api/runs/ap-1/" + a for a in (
            "answer", "continue", "fork", "upgrade", "check", "verify",
            "signal", "cancel", "delete")]
        actions += ["/api/batch/" + a for a in ("continue", "cancel",
                                                 "delete")]
        for paths, method, allow in ((reads, "POST", "GET, HEAD"),
                                     (actions, "GET", "POST")):
            for path in paths:
                code, headers, j = self.raw(url, path, method, csrf)
                self.assertEqual((code, headers.get("Allow"), j["error"]),
                                 (405, allow, "method"), (method, path, j))
        # a path of neither kind is still 404, whatever the method
        for method in ("GET", "POST"):
            for path in ("/api/nothing", "/api/runs/ap-1/nothing"):
                code, _, j = self.raw(url, path, method, csrf)
                self.assertEqual((code, j["error"]), (404, "not_found"),
                                 (method, path))
        # the run is as it was: no action was taken
        self.assertEqual(self.api(url, "/api/runs/ap-1")[1]["run"]["status"],
                         "suspended")

    def test_a_batch_limit_is_honoured_or_refused(self):
        """A batch's limit is 1..100, as the bad_limit message says: more
        is refused, never cut; one within is honoured."""
        store = self.new_store()
        for i in range(3):
            self.ok(A.replay, store, "--plugin", A.plugin, "--submit",
                    "note", "--payload", "{}", "--new-id", "n-%d" % i)
            self.ok(A.replay, store, "--plugin", A.plugin, "--run",
                    "n-%d" % i)
        url, csrf = self.web(store)
        for action in ("continue", "cancel", "delete"):
            for limit in ("0", "101", "500", "501"):
                code, j = self.api(url, "/api/batch/%s?status=completed&"
                                   "dry_run=1&limit=%s" % (action, limit),
                                   "", csrf)
                self.assertEqual((code, j["error"], j["message"]),
                                 (400, "bad_limit", "limit: 1..100"),
                                 (action, limit))
        code, j = self.api(url, "/api/batch/delete?status=completed&"
                           "dry_run=1&limit=2", "", csrf)
        self.assertEqual((code, j["matched"], len(j["runs"]), j["truncated"]),
                         (200, 2, 2, True), j)
        code, j = self.api(url, "/api/batch/delete?status=completed&"
                           "limit=100", "", csrf)
        self.assertEqual((code, j["deleted"], j["truncated"]),
                         (200, 3, False), j)
        # the list's pages keep theirs
        code, j = self.api(url, "/api/runs?limit=501")
        self.assertEqual((code, j["message"]), (400, "limit: 1..500"))

    def test_a_steps_cursor_the_run_has_not_is_refused(self):
        """/steps from a step the run does not have is 400 bad_cursor, not
        an empty page; a cursor the pages gave still reads on."""
        store = self.new_store()
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        url, _ = self.web(store)
        code, j = self.api(url, "/api/runs/ap-1/steps?limit=1")
        self.assertEqual(code, 200, j)
        self.assertIsNotNone(j["next"], j)
        code, more = self.api(url, "/api/runs/ap-1/steps?cursor=%s"
                              % j["next"])
        self.assertEqual((code, more["steps"][0]["id"]), (200, j["next"]))
        for cursor in ("0:99", "0.7:0", "9:0"):
            code, j = self.api(url, "/api/runs/ap-1/steps?cursor=" + cursor)
            self.assertEqual((code, j["error"]), (400, "bad_cursor"),
                             (cursor, j))
            if cursor != "9:0":  # not a path a run can have: said so
                self.assertIn("has no step " + cursor, j["message"])
        code, j = self.api(url, "/api/runs/never/steps?cursor=0:99")
        self.assertEqual((code, j["error"]), (404, "not_found"), j)


class PgSecrets(Stores, unittest.TestCase):
    """On a server that answers: the password given (trust ignores it)
    is in no output."""
    pg = True

    def test_no_password_in_outputs(self):
        store = self.new_store() + "&password=" + SECRET
        rc, out, err = self.replay(store, "--plugin", A.plugin, "--submit",
                                   "note", "--payload", "{}", "--json")
        self.assertEqual(rc, 0, err)
        self.assertNotIn(SECRET, out + err)
        self.assertIn("password=***", json.loads(out)["store"])
        web = subprocess.Popen([A.web, store, "--read-only", "--listen",
                                "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            line = web.stdout.readline()
            self.assertNotIn(SECRET, line)
            url = re.search(r"http://\S+", line).group(0)
            with urllib.request.urlopen(url + "/api/session",
                                        timeout=30) as r:
                session = json.loads(r.read())
            self.assertIn("password=***", session["store"])
            self.assertNotIn(SECRET, json.dumps(session))
        finally:
            err = stopped(web)
        self.assertNotIn(SECRET, err)
        rc, _, err = run(A.dump, self.new_store() + "&password=" + SECRET)
        self.assertEqual(rc, 2, err)
        self.assertNotIn(SECRET, err)


class PgReadOnly(Stores, unittest.TestCase):
    """What opens a store for reading leaves every row as it was: each
    table of the schema, rows and their xmin, hashed before and after."""
    pg = True

    def rows(self, schema):
        if getattr(self, "union", None):  # the tables are the same each time
            return sorted(self.ok("psql", "-XAtq", "-v", "ON_ERROR_STOP=1",
                                  PG, "-c", self.union).split())
        q = ("SELECT string_agg(format('SELECT %%L || md5(coalesce(string_agg("
             "t.xmin::text || t::text, ''|'' ORDER BY t::text), '''')) FROM "
             "%%I.%%I t', c.relname, n.nspname, c.relname), ' UNION ALL ') "
             "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
             "WHERE n.nspname = '%s' AND c.relkind = 'r'" % schema)
        self.union = self.ok("psql", "-XAtq", "-v", "ON_ERROR_STOP=1", PG,
                             "-c", q)
        self.assertTrue(self.union.strip(), "no tables in " + schema)
        return self.rows(schema)

    def test_readers_write_nothing(self):
        store = self.new_store()
        schema = store.rsplit("schema=", 1)[1]
        p = ["--plugin", A.plugin]
        self.ok(A.replay, store, *p, "--submit", "note", "--payload",
                '{"text":"a"}', "--new-id", "n-1")
        self.ok(A.replay, store, *p, "--run", "n-1")
        self.ok(A.helper, "start", store, A.plugin, "approval", "ap-1", "{}")
        self.ok(A.replay, store, "--schedule-put", "tick", "--cron",
                "0 3 * * *", "--policy", "note", "--payload", "{}")
        before = self.rows(schema)
        for cmd in ([A.dump, store], [A.dump, store, "--run", "ap-1"],
                    [A.dump, store, "--run", "n-1", "--format", "jsonl"],
                    [A.dump, store, "--verify"], [A.dump, store, "--stats"],
                    [A.dump, store, "--schedules"],
                    [A.replay, store, *p, "--check"],
                    [A.replay, store, *p, "--check", "--live"],
                    [A.replay, store, *p, "--upgrade", "--all-diverged",
                     "--dry-run"],
                    [A.replay, store, "--prune", "--older-than", "0s",
                     "--dry-run"]):
            self.ok(*cmd)
            self.assertEqual(self.rows(schema), before, cmd[1:])
        # ledger-web --read-only, read through every kind of page, and
        # refusing an action
        web = subprocess.Popen([A.web, store, "--read-only", "--listen",
                                "127.0.0.1:0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            url = re.search(r"http://\S+", web.stdout.readline()).group(0)
            for path in ("/api/session", "/api/runs", "/api/runs/ap-1",
                         "/api/runs/ap-1/timeline", "/api/runs/n-1/export",
                         "/api/inbox", "/api/overview?window=day"):
                with urllib.request.urlopen(url + path, timeout=30) as r:
                    self.assertEqual(r.status, 200, path)
                    r.read()
            post = urllib.request.Request(url + "/api/runs/ap-1/cancel",
                                          data=b"{}", method="POST")
            with self.assertRaises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(post, timeout=30)
            self.assertEqual(refused.exception.code, 403)
        finally:
            stopped(web)
        self.assertEqual(self.rows(schema), before, "ledger-web --read-only")
        # and a write is seen: the hashes are of what a command changes
        rc, _, err = self.replay(store, "--cancel", "ap-1")
        self.assertEqual(rc, 5, err)
        self.assertNotEqual(self.rows(schema), before)


def main():
    global A
    ap = argparse.ArgumentParser()
    for name in ("dump", "replay", "web", "plugin", "helper", "source",
                 "crash-plugin"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--bench")  # pl-bench, when the build makes it
    ap.add_argument("only", nargs="*")
    A = ap.parse_args()
    if A.only == ["Pg"]:
        if not PG:
            sys.exit("the Pg cases run under tests/pg_run.sh")
        suite = unittest.TestSuite()
        for case in (PgSecrets, PgReadOnly, Dump, Replay, Web):
            for name in unittest.TestLoader().getTestCaseNames(case):
                test = case(name)
                test.pg = True
                suite.addTest(test)
    else:
        suite = unittest.TestSuite(
            unittest.TestLoader().loadTestsFromTestCase(case)
            for case in (Help, Secrets, Dump, Replay, Web))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
