#!/usr/bin/env python3
"""ledger-replay --mcp-unchecked: an MCP server one of whose tools has an
inputSchema the validator refuses (tests/mcp_fake_server.py's
"unevaluated": "unevaluatedProperties") is refused without the flag, exit
2 and a message naming the tool, the keyword and the flag; with it, the
server is mounted, that tool without its schema and callable, and the
run it made checks cleanly with the flag; the flag without --mcp is bad
usage (exit 1).

usage: test_mcp_unchecked.py --replay R --dump D --fake mcp_fake_server.py
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

A = None


def run(*cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


class Unchecked(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pl-mcp-unchecked-")
        self.store = os.path.join(self.tmp, "s.db")
        self.mcp = ["--mcp", "fake=stdio:python3 %s unevaluated %s"
                    % (A.fake, self.tmp)]
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def replay(self, *args):
        return run(A.replay, self.store, *self.mcp, *args)

    def calls(self):
        with open(os.path.join(self.tmp, "log")) as f:
            return sum('"tools/call"' in line for line in f)

    def test_refused_without_the_flag(self):
        for args in (["--submit", "fake.strict", "--payload", "{}"],
                     ["--check"], ["--check", "--json"]):
            rc, out, err = self.replay(*args)
            self.assertEqual(rc, 2, (args, out, err))
            said = json.loads(out)["message"] if "--json" in args else err
            for words in ("tool strict", "#/unevaluatedProperties",
                          "--mcp-unchecked"):
                self.assertIn(words, said, args)
        self.assertFalse(os.path.exists(self.store), "a store was made")

    def test_mounted_with_it_the_tool_callable(self):
        u = "--mcp-unchecked"
        rc, out, err = self.replay(u, "--submit", "fake.strict", "--payload",
                                   '{"text": "hi", "more": 1}', "--new-id",
                                   "s-1")
        self.assertEqual(rc, 0, err)
        rc, out, err = self.replay(u, "--run", "s-1", "--json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["runs"][0]["status"], "completed")
        # reached the server with what it was given
        rc, out, err = run(A.dump, self.store, "--run", "s-1", "--format",
                           "jsonl")
        self.assertEqual(rc, 0, err)
        steps = [json.loads(x) for x in out.splitlines()]
        results = [s["payload"] for s in steps
                   if s.get("type") == "action_result"]
        self.assertEqual(results[-1]["structuredContent"]["args"],
                         {"text": "hi", "more": 1})
        self.assertEqual(self.calls(), 1)
        # and the runs check cleanly with the flag, never calling again
        rc, out, err = self.replay(u, "--check")
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(self.calls(), 1)

    def test_the_flag_without_an_mcp_server_is_refused(self):
        rc, out, err = run(A.replay, self.store, "--mcp-unchecked", "--check")
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("--mcp-unchecked goes with --mcp", err)
        self.assertFalse(os.path.exists(self.store), "a store was made")


def main():
    global A
    ap = argparse.ArgumentParser()
    for name in ("replay", "dump", "fake"):
        ap.add_argument("--" + name, required=True)
    A = ap.parse_args()
    suite = unittest.TestLoader().loadTestsFromTestCase(Unchecked)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
