#!/usr/bin/env python3
"""The tools on a chain of runs continued as new, whose links' ids carry
a '~' (loop, loop~1, loop~2: `dump_fixture STORE chain loop`, the first
link deleted).  A run id is 1 to 128 bytes of [A-Za-z0-9._:@~-]
(include/policyledger.h): ledger-web serves each link's page and steps,
pages its run list through the links with its cursor and acts on a link;
ledger-replay takes such an id as --new-id, and a cancellation sent to a
chain goes on past a deleted link to the one that goes on; a link's copy
imported under another id is a chain of its own, which passes nothing on
to the original's links.

usage: test_chain_tools.py --web W --replay R --dump D --plugin P --fixture F
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
import unittest
import urllib.error
import urllib.request

A = None


class ChainTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        """The chain made once; each test has a copy of it."""
        cls.made = tempfile.mkdtemp(prefix="pl-chain-made-")
        os.mkdir(os.path.join(cls.made, "store"))
        subprocess.run([A.fixture, os.path.join(cls.made, "store"), "chain",
                        "loop"], check=True, timeout=60)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.made, True)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pl-chain-tools-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.store = os.path.join(self.tmp, "store")
        shutil.copytree(os.path.join(self.made, "store"), self.store)

    def web(self, *args):
        err = tempfile.TemporaryFile(mode="w+")
        w = subprocess.Popen([A.web, self.store, "--listen", "127.0.0.1:0"]
                             + list(args),
                             stdout=subprocess.PIPE, stderr=err, text=True)

        def stop():
            w.send_signal(signal.SIGTERM)
            w.communicate(timeout=30)
            err.seek(0)
            text = err.read()
            err.close()
            self.assertEqual(w.returncode, 0, text)
            self.assertNotRegex(text, r"Sanitizer|runtime error: ")
        self.addCleanup(stop)
        self.url = re.search(r"http://\S+", w.stdout.readline()).group(0)
        self.csrf = self.api("/api/session")[1]["csrf"]

    def api(self, path, body=None):
        req = urllib.request.Request(
            self.url + path, method="GET" if body is None else "POST",
            data=None if body is None else body.encode(),
            headers={"X-CSRF-Token": self.csrf} if body is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_ledger_web_serves_and_acts_on_a_link(self):
        self.web()
        code, j = self.api("/api/runs/loop~1")
        self.assertEqual(code, 200, j)
        self.assertEqual((j["run"]["id"], j["run"]["status"],
                          j["run"]["successor"]),
                         ("loop~1", "continued", "loop~2"))
        code, j = self.api("/api/runs/loop~2/steps")
        self.assertEqual(code, 200, j)
        code, j = self.api("/api/runs/loop")
        self.assertEqual((code, j["error"]), (404, "deleted"), j)
        # the list a run a page: each page's cursor is a link's id
        seen, cursor = [], ""
        for _ in range(5):
            code, j = self.api("/api/runs?limit=1&order=asc" + cursor)
            self.assertEqual(code, 200, j)
            seen += [r["id"] for r in j["runs"]]
            if not j["next_cursor"]:
                break
            cursor = "&cursor=" + j["next_cursor"]
        self.assertEqual(seen, ["loop~1", "loop~2"])
        code, j = self.api("/api/runs/loop~2/cancel", "{}")
        self.assertEqual(code, 200, j)
        self.assertEqual(self.api("/api/runs/loop~2")[1]["run"]["status"],
                         "cancelled")
        code, j = self.api("/api/runs/loop~1/delete", "{}")
        self.assertEqual(code, 200, j)
        self.assertEqual(self.api("/api/runs/loop~1")[0], 404)

    def test_ledger_replay_takes_such_an_id(self):
        p = subprocess.run([A.replay, self.store, "--plugin", A.plugin,
                            "--submit", "note", "--payload", "{}",
                            "--new-id", "note~1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("note~1", p.stdout)
        p = subprocess.run([A.replay, self.store, "--plugin", A.plugin,
                            "--submit", "note", "--payload", "{}",
                            "--new-id", "note/1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("[A-Za-z0-9._:@~-]", p.stderr)

    def test_a_cancel_reaches_the_link_past_a_deleted_one(self):
        """--cancel of a chain by its first id, its second link deleted:
        the link that goes on, loop~2, is cancelled, and said so."""
        store = os.path.join(self.tmp, "gap")
        os.mkdir(store)
        subprocess.run([A.fixture, store, "chain", "loop~1"], check=True,
                       timeout=60)
        p = subprocess.run([A.replay, store, "--cancel", "loop~1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("run loop~2: cancelled", p.stdout)

    def test_run_follows_a_chain_to_its_deleted_end(self):
        """--run of a chain whose last link completed and was pruned (a
        prune of the completed runs keeps the continued ones): the chain
        has ended, exit 0, the deleted link said so; it said "lp~1 goes
        on", then "no run 'lp~1'", exit 2."""
        store = os.path.join(self.tmp, "end")

        def replay(*args):
            return subprocess.run([A.replay, store, "--plugin", A.plugin]
                                  + list(args), capture_output=True,
                                  text=True, timeout=60)
        p = replay("--submit", "looper", "--payload", '{"left": 1}',
                   "--new-id", "lp")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = replay("--run", "lp")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("run lp~1: completed", p.stdout)
        p = subprocess.run([A.replay, store, "--prune", "--older-than", "0s",
                            "--status", "completed"], capture_output=True,
                           text=True, timeout=60)
        self.assertIn("deleted lp~1 (completed", p.stdout)
        p = replay("--run", "lp")
        self.assertEqual(p.returncode, 0, (p.stdout, p.stderr))
        self.assertIn("run lp: continued", p.stdout)
        self.assertIn("run lp~1: completed, deleted on ", p.stdout)
        self.assertNotIn("goes on", p.stdout)
        self.assertEqual(p.stderr, "")
        p = replay("--run", "lp", "--json")
        doc = json.loads(p.stdout)
        self.assertEqual(doc["exit"], 0, doc)
        self.assertEqual([(r["run_id"], r["status"]) for r in doc["runs"]],
                         [("lp", "continued"), ("lp~1", "completed")])
        self.assertIn("deleted", doc["runs"][1])
        # an event to it: ended, not "no such run"
        p = replay("--signal", "lp", "--name", "go", "--payload", "{}")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("has ended (completed) and was deleted on", p.stderr)

    def test_web_continue_follows_the_chain(self):
        """POST /continue is ledger-replay --run: it continues the chain
        as that does, each link after the run's in "successors"; it ran
        the first link alone, its successor left queued."""
        p = subprocess.run([A.replay, self.store, "--plugin", A.plugin,
                            "--submit", "looper", "--payload", '{"left": 2}',
                            "--new-id", "lw"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.web("--plugin", A.plugin)
        code, j = self.api("/api/runs/lw/continue", "{}")
        self.assertEqual(code, 200, j)
        self.assertEqual((j["run_id"], j["status"]), ("lw", "continued"), j)
        self.assertEqual([(r["run_id"], r["status"], r["note"])
                          for r in j.get("successors", [])],
                         [("lw~1", "continued", "(successor)"),
                          ("lw~2", "completed", "(successor)")], j)
        self.assertEqual(self.api("/api/runs/lw~2")[1]["run"]["status"],
                         "completed")

    def test_a_copy_of_a_link_is_a_chain_of_its_own(self):
        exp = os.path.join(self.tmp, "loop1.jsonl")
        with open(exp, "w") as f:
            subprocess.run([A.dump, self.store, "--run", "loop~1", "--format",
                            "jsonl"], stdout=f, check=True, timeout=60)
        p = subprocess.run([A.replay, self.store, "--import", exp,
                            "--new-id", "copy"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([A.dump, self.store, "--run", "copy", "--chain",
                            "--format", "jsonl"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([json.loads(l)["id"] for l in p.stdout.splitlines()],
                         ["copy"])
        p = subprocess.run([A.replay, self.store, "--cancel", "copy"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("'copy' continued as new, but its successor", p.stderr)
        p = subprocess.run([A.dump, self.store, "--run", "loop~2", "--format",
                            "json"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(json.loads(p.stdout)["run"]["status"], "submitted")


def main():
    global A
    ap = argparse.ArgumentParser()
    for name in ("web", "replay", "dump", "plugin", "fixture"):
        ap.add_argument("--" + name, required=True)
    A, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
