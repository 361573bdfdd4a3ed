#!/usr/bin/env python3
"""ledger-replay on real stores: the executables of one build tree, run
against LMDB stores this script makes (the order demo killed with SIGKILL, a
process holding a run mid-call, runs waiting for a human).

Every case checks the exit status, what the JSON summary says field by
field, and the effects the policies leave in files (the outside world).
Standard library only.  Exits 1 if any case fails.
"""
import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback

ARGS = None
SANITIZER_MARKS = ("Sanitizer", "runtime error:")


class Failure(Exception):
    pass


def check(cond, what, *context):
    if not cond:
        raise Failure(what + "".join("\n  " + str(c) for c in context))


def run(argv, stdin=None, env=None, expect=None, preexec=None):
    """Run a program; fail on a sanitizer report or an unexpected status."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                       env=full_env, timeout=120, preexec_fn=preexec)
    for mark in SANITIZER_MARKS:
        check(mark not in p.stderr, "sanitizer report from %s" % argv[0],
              p.stderr)
    if expect is not None:
        check(p.returncode == expect,
              "%s exited %d, expected %d" % (" ".join(argv[1:]), p.returncode,
                                             expect),
              "stdout: " + p.stdout, "stderr: " + p.stderr)
    return p


class Store:
    """A temporary directory with a store, an effects file and the tools."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ledger-replay-")
        self.path = os.path.join(self.dir, "store.db")
        self.effects = os.path.join(self.dir, "effects.txt")
        self.env = {"ORDER_EFFECTS": self.effects,
                    "REPLAY_EFFECTS": self.effects}

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def tool(self, *args, plugins=None, expect=None, stdin=None, store=None,
             preexec=None):
        argv = [ARGS.tool, store or self.path]
        for p in plugins or [ARGS.order_plugin]:
            argv += ["--plugin", p]
        return run(argv + list(args), stdin=stdin, env=self.env,
                   expect=expect, preexec=preexec)

    def tool_json(self, *args, plugins=None, expect=None, stdin=None):
        p = self.tool(*args, "--json", plugins=plugins, expect=expect,
                      stdin=stdin)
        try:
            doc = json.loads(p.stdout)
        except ValueError as e:
            raise Failure("--json printed no JSON document: %s\n%s"
                          % (e, p.stdout))
        check(doc["exit"] == p.returncode, "the document's exit is not the "
              "exit status", doc, p.returncode)
        check(doc["store"] == self.path, "the document names another store",
              doc)
        return doc, p

    def demo(self, order, crash_after=None, plugin=None):
        argv = [ARGS.demo, "--store", self.path, "--effects", self.effects,
                "--order", order, "--quiet",
                "--plugin", plugin or ARGS.order_plugin]
        if crash_after is not None:
            argv += ["--crash-after", str(crash_after)]
        return run(argv, env=self.env)

    def helper(self, *args, expect=0):
        return run([ARGS.helper, args[0], self.path] + list(args[1:]),
                   env=self.env, expect=expect)

    def effect_lines(self, prefix=""):
        try:
            with open(self.effects) as f:
                return [l.rstrip("\n") for l in f if l.startswith(prefix)]
        except FileNotFoundError:
            return []

    def data_digest(self):
        with open(self.path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()


def build_id(path):
    """The GNU build-id of an ELF64 little-endian file, as pl_plugin_load()
    names it ("build-id:<hex>")."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1,
          "%s is not an ELF64 LE file" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        sh = shoff + i * shentsize
        sh_type, = struct.unpack_from("<I", data, sh + 4)
        off, size = struct.unpack_from("<QQ", data, sh + 0x18)
        if sh_type != 7:  # SHT_NOTE
            continue
        p = off
        while p + 12 <= off + size:
            namesz, descsz, ntype = struct.unpack_from("<III", data, p)
            name = data[p + 12:p + 12 + namesz]
            desc_at = p + 12 + ((namesz + 3) & ~3)
            if ntype == 3 and name == b"GNU\x00":
                return "build-id:" + data[desc_at:desc_at + descsz].hex()
            p = desc_at + ((descsz + 3) & ~3)
    raise Failure("%s has no build-id" % path)


def charges_of(store, order):
    return [l for l in store.effect_lines("charge_card ")
            if l.endswith(" for " + order)]


# ---- cases -----------------------------------------------------------------


def case_usage():
    s = Store()
    try:
        p = run([ARGS.tool, "--help"], expect=0)
        for word in ("--run", "--all", "--resume", "--check", "--fork",
                     "--json", "Examples", "Exit status"):
            check(word in p.stdout, "--help does not explain " + word)
        check(p.stderr == "", "--help wrote to stderr", p.stderr)
        # its examples name the plugin the build makes, and its exit
        # statuses every way a run can end
        plugin = os.path.basename(ARGS.order_plugin)
        check("./" + plugin in p.stdout and "order_plugin.so" not in
              p.stdout, "--help names another plugin than " + plugin)
        text = " ".join(p.stdout.split())
        for words in ("suspended or waiting", "failed or was cancelled",
                      "--submit, --import and --schedule-put create"):
            check(words in text, "--help's exit statuses miss: " + words)
        bad = [
            [],                                           # nothing at all
            [s.path],                                     # no plugin, no mode
            [s.path, "--plugin", ARGS.order_plugin],      # no mode
            [s.path, "--all"],                            # no plugin
            [s.path, "--plugin", ARGS.order_plugin, "--bogus"],
            [s.path, "--plugin", ARGS.order_plugin, "--run"],  # no value
            [s.path, "--plugin", ARGS.order_plugin, "--all", "--run", "x"],
            [s.path, "--plugin", ARGS.order_plugin, "--all", "--fork", "x",
             "--at", "0:1"],
            [s.path, "--plugin", ARGS.order_plugin, "--run", "x",
             "--answer", "{}"],                           # answer without resume
            [s.path, "--plugin", ARGS.order_plugin, "--resume", "x"],
            [s.path, "--plugin", ARGS.order_plugin, "--fork", "x"],  # no --at
            [s.path, "--plugin", ARGS.order_plugin, "--all", "--at", "0:1"],
            [s.path, "extra", "--plugin", ARGS.order_plugin, "--all"],
            # an --mcp that is no NAME=SPEC, however it is not: usage
            [s.path, "--mcp", "fs", "--check"],
            [s.path, "--mcp", "fs=stdio:", "--check"],
            [s.path, "--mcp", "fs=stdio:   ", "--check"],
            [s.path, "--mcp", "fs=nonsense", "--check"],
            [s.path, "--mcp", "fs=", "--check"],
            [s.path, "--mcp", "a.b=stdio:true", "--check"],
            # flow control: --submit's, in range, the key with its limit
            [s.path, "--plugin", ARGS.order_plugin, "--all", "--priority",
             "1"],
            [s.path, "--plugin", ARGS.order_plugin, "--submit", "order",
             "--payload", "{}", "--priority", "1001"],
            [s.path, "--plugin", ARGS.order_plugin, "--submit", "order",
             "--payload", "{}", "--priority", "high"],
            # a number is its digits: no blank or sign strtol() would skip
            [s.path, "--plugin", ARGS.order_plugin, "--submit", "order",
             "--payload", "{}", "--priority", " 5"],
            [s.path, "--plugin", ARGS.order_plugin, "--submit", "order",
             "--payload", "{}", "--priority", "+5"],
            [s.path, "--plugin", ARGS.order_plugin, "--worker",
             "--concurrency", " 2"],
            [s.path, "--plugin", ARGS.order_plugin, "--submit", "order",
             "--payload", "{}", "--key", "tenant-1"],
            [s.path, "--plugin", ARGS.order_plugin, "--submit", "order",
             "--payload", "{}", "--key-limit", "2"],
            [s.path, "--plugin", ARGS.order_plugin, "--submit", "order",
             "--payload", "{}", "--key", "t", "--key-limit", "0"],
        ]
        # a user's string in a message: quoted, escaped, cut (one line)
        long = "12\x1b[31m" + "x" * 200
        for argv in ([s.path, "--plugin", ARGS.order_plugin, "--worker",
                      "--concurrency", long],
                     [s.path, "--plugin", ARGS.order_plugin, "--submit",
                      "order", "--payload", "{}", "--priority", long],
                     [s.path, long, "--plugin", ARGS.order_plugin, "--all"],
                     [s.path, "--mcp", long, "--check"],
                     [s.path, "--prune", "--older-than", long],
                     [s.path, "--prune", "--older-than", "1d", "--status",
                      long],
                     [s.path, "--plugin", ARGS.order_plugin, "--worker",
                      "--retain", long],
                     [s.path, "--plugin", ARGS.order_plugin, "--resume",
                      "x", "--answer", "@" + long]):
            p = run([ARGS.tool] + argv, expect=1)
            check(p.stderr.count("\n") == 1 and "\x1b" not in p.stderr and
                  re.search(r'"12\\x1b\[31mx+"\.\.\. \(20[67] bytes\)',
                            p.stderr), "a user's string not quoted and cut",
                  argv, p.stderr)
        for argv in bad:
            p = run([ARGS.tool] + argv, expect=1)
            check(p.stderr.startswith("ledger-replay: "),
                  "usage error without a message on stderr", argv, p.stderr)
            check(p.stdout == "", "usage error printed on stdout", argv)
        # no mode, with a plugin or without (--prune, --import and others
        # need none): the message offers every mode --help lists
        modes = ("--run", "--all", "--resume", "--check", "--upgrade",
                 "--fork", "--signal", "--cancel", "--wake", "--import",
                 "--worker", "--submit", "--prune", "--schedule-put",
                 "--schedule-delete")
        for argv in ([s.path], [s.path, "--plugin", ARGS.order_plugin],
                     [s.path, "--json"]):
            p = run([ARGS.tool] + argv, expect=1)
            missing = [m for m in modes
                       if not re.search(re.escape(m) + r"\b(?!-)", p.stderr)]
            check("nothing to do" in p.stderr and not missing,
                  "no mode: the message leaves out %s" % missing, argv,
                  p.stderr)
        check(not os.path.exists(s.path), "a usage error created the store")
    finally:
        s.close()


def case_bad_store():
    s = Store()
    try:
        # no such path: an error, and nothing is created
        p = s.tool("--all", expect=2)
        check("no store" in p.stderr, "missing store not named", p.stderr)
        check(not os.path.exists(s.path), "the tool created a store")
        # an empty file
        open(s.path, "w").close()
        p = s.tool("--all", expect=2)
        check("empty" in p.stderr, "empty store not named", p.stderr)
        # a directory with no store in it: still nothing created
        d = os.path.join(s.dir, "emptydir")
        os.mkdir(d)
        p = s.tool("--check", store=d, expect=2)
        check(os.listdir(d) == [], "the tool created files in a directory",
              os.listdir(d))
        # not an LMDB file
        with open(s.path, "w") as f:
            f.write("this is not a store\n" * 500)
        p = s.tool("--all", expect=2)
        check("cannot open the store" in p.stderr, "bad store not named",
              p.stderr)
        # a real store, but no such run
        os.unlink(s.path)
        s.demo("A-1")
        for args in (["--run", "nope"], ["--check", "--run", "nope"],
                     ["--resume", "nope", "--answer", "{}"],
                     ["--fork", "nope", "--at", "0:1"],
                     ["--run", "bad id!"]):
            p = s.tool(*args, expect=2)
            check("no run" in p.stderr, "missing run not named", args,
                  p.stderr)
    finally:
        s.close()


def case_bad_plugin():
    s = Store()
    try:
        s.demo("A-1")
        not_so = os.path.join(s.dir, "not-a-plugin.so")
        with open(not_so, "w") as f:
            f.write("not a shared object\n")
        for plugin, word in ((not_so, "not-a-plugin.so"),
                             (os.path.join(s.dir, "missing.so"), "missing"),
                             (ARGS.failing_plugin, "plugin"),
                             (ARGS.no_entry_plugin, "pl_plugin_init")):
            p = s.tool("--all", plugins=[plugin], expect=2)
            check("cannot load plugin" in p.stderr and word in p.stderr,
                  "plugin failure not explained", plugin, p.stderr)
        # two plugins registering the same policies
        p = s.tool("--all", plugins=[ARGS.order_plugin, ARGS.order_plugin_v2],
                   expect=2)
        check("cannot load plugin" in p.stderr, "duplicate not explained",
              p.stderr)
    finally:
        s.close()


def case_crash_then_run():
    """order-demo killed at every step boundary; --run finishes it and no
    finished call runs twice (one charge per order)."""
    s = Store()
    try:
        crashed = 0
        for n in range(1, 40):
            order = "C-%d" % n
            p = s.demo(order, crash_after=n)
            if p.returncode == 0:
                break  # past the run's last boundary
            check(p.returncode == -signal.SIGKILL,
                  "order-demo did not die of SIGKILL", n, p.returncode,
                  p.stderr)
            crashed += 1
            run_id = "order-" + order
            doc, _ = s.tool_json("--run", run_id, expect=0)
            check(doc["mode"] == "run" and len(doc["runs"]) == 1,
                  "one run expected", doc)
            r = doc["runs"][0]
            check(r["run_id"] == run_id and r["status"] == "completed",
                  "crashed run not completed", n, r)
            check(isinstance(r["calls_served"], int)
                  and isinstance(r["calls_executed"], int)
                  and r["calls_served"] + r["calls_executed"] >= 3,
                  "counters missing", r)
            check(isinstance(r["elapsed_ms"], (int, float))
                  and r["elapsed_ms"] >= 0, "no time", r)
            check(r["result"]["status"] == "shipped"
                  and r["result"]["order_id"] == order, "wrong result", r)
            check(len(charges_of(s, order)) == 1,
                  "charge_card ran %d times for %s"
                  % (len(charges_of(s, order)), order), s.effect_lines())
            ships = [l for l in s.effect_lines("ship ")
                     if " %s via " % order in l]
            check(len(ships) >= 1, "never shipped", n)
            s.helper("verify", run_id)
            # a completed run is final: served, never executed again
            p = s.tool("--run", run_id, expect=0)
            check("completed" in p.stdout and "executed 0" in p.stdout,
                  "a completed run executed again", p.stdout)
            check(len(charges_of(s, order)) == 1, "charged again", order)
        check(crashed >= 5, "too few crash points", crashed)
    finally:
        s.close()


def case_all_skips_a_live_owner():
    s = Store()
    holder = None
    try:
        s.demo("A-1")  # completed: --all leaves it alone
        for order, n in (("A-2", 4), ("A-3", 9)):
            p = s.demo(order, crash_after=n)
            check(p.returncode == -signal.SIGKILL, "demo did not crash", p)
        holder = subprocess.Popen([ARGS.helper, "hold", s.path, "held"],
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = holder.stdout.readline()
        check(line == "waiting\n", "the holder did not start its call", line)

        doc, p = s.tool_json("--all", expect=0)
        ids = sorted(r["run_id"] for r in doc["runs"])
        check(ids == ["order-A-2", "order-A-3"], "--all continued the wrong "
              "runs", doc)
        for r in doc["runs"]:
            check(r["status"] == "completed", "not completed", r)
            check(r["calls_served"] >= 1, "nothing served", r)
        check(len(doc["skipped"]) == 1, "the live run was not skipped", doc)
        sk = doc["skipped"][0]
        check(sk["run_id"] == "held" and sk["owner_pid"] == holder.pid,
              "skipped the wrong run or owner", sk, holder.pid)
        for order in ("A-1", "A-2", "A-3"):
            check(len(charges_of(s, order)) == 1, "charged twice", order)

        # a run a live process owns is refused, not touched
        p = s.tool("--run", "held", expect=1)
        check("held" in p.stderr and "process" in p.stderr,
              "busy run not explained", p.stderr)
        p = s.tool("--fork", "held", "--at", "0:0", expect=1)
        check("live" in p.stderr, "busy fork not explained", p.stderr)
        # a second --all finds nothing to do
        doc, _ = s.tool_json("--all", expect=0)
        check(doc["runs"] == [] and len(doc["skipped"]) == 1,
              "second --all did something", doc)

        out, err = holder.communicate(input="", timeout=60)
        check(holder.returncode == 0 and out == "completed\n",
              "the holder did not finish its run", out, err)
        holder = None
        doc, _ = s.tool_json("--all", expect=0)
        check(doc["runs"] == [] and doc["skipped"] == [],
              "a finished run was continued", doc)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        s.close()


def damage_run_record(path, order):
    """Flip a byte inside every copy in the file of the run record of
    order-ORDER (its root payload names the order; the run record, unlike
    the steps that carry it too, has a "created" field): reading it is
    then PL_ECORRUPT, by its checksum."""
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    head = b"\xa6policy\xa5order\xa7payload"
    hit = 0
    at = raw.find(head)
    while at >= 0:
        nxt = raw.find(head, at + 1)
        rec = raw[at:min(at + 400, nxt if nxt >= 0 else len(raw))]
        if b"\xa3" + order.encode() in rec and b"\xa7created" in rec:
            raw[at + rec.find(b"\xa7created") + 3] ^= 0x04
            hit += 1
        at = nxt
    check(hit > 0, "no run record of order %s found in the file" % order)
    with open(path, "wb") as f:
        f.write(raw)


def damage_steps(path, order):
    """Flip a bit of every copy of order-ORDER's reserve_stock call step
    (its run record does not hold it): reading the run's ledger is then
    PL_ECORRUPT, by the step's checksum, while its record reads."""
    flip_every(path, b"\xadreserve_stock\xa7payload\x82\xa8order_id\xa3"
               + order.encode())


def case_all_counts_refused_runs_apart():
    """--all continues the crashed runs it can; one the engine refuses (here
    recorded by newer code: PL_ENEWERCODE) is not counted as continued but
    listed apart with its reason, in text and in the JSON summary, exit 1
    as docs/tools.md says.  A run whose ledger is damaged is continued and
    ends failed, PL_ECORRUPT (exit 5), as --run ends it."""
    s = Store()
    try:
        P = [ARGS.order_plugin, ARGS.plugin]
        for order in ("A-1", "A-2"):
            p = s.demo(order, crash_after=4)
            check(p.returncode == -signal.SIGKILL, "demo did not crash", p)
        damage_steps(s.path, "A-2")
        s.env["REPLAY_CODE_VERSION"] = "2"
        s.helper("start", ARGS.plugin, "gated", "new-1", "{}")
        s.env["REPLAY_CODE_VERSION"] = "1"
        s.tool("--resume", "new-1", "--answer", '{"approved": true}',
               plugins=P, expect=1)
        doc, p = s.tool_json("--all", plugins=P, expect=1)
        got = {r["run_id"]: r for r in doc["runs"]}
        check(got["order-A-1"]["status"] == "completed"
              and got["order-A-2"]["status"] == "failed"
              and got["order-A-2"]["error"] == "PL_ECORRUPT"
              and got["new-1"]["status"] == "not_run"
              and got["new-1"]["error"] == "PL_ENEWERCODE"
              and "by newer code" in got["new-1"]["message"],
              "--all's runs", doc, p.stderr)
        sm = doc["summary"]
        check(sm["continued"] == 2 and sm["skipped"] == 0
              and sm["refused"] == [{"run_id": "new-1",
                                     "error": "PL_ENEWERCODE"}],
              "the summary does not count the refused run apart", sm)
        p = s.tool("--all", plugins=P, expect=1)
        check(re.search(r"^0 crashed run\(s\) continued, 1 refused "
                        r"\(new-1: PL_ENEWERCODE\), 0 skipped ", p.stdout,
                        re.M),
              "the text summary does not count the refused run apart",
              p.stdout, p.stderr)
    finally:
        s.close()


def case_all_goes_past_a_damaged_run_record():
    """--all finishes every crashed run though another run's record cannot
    be read: that run is skipped with its reason (exit 2), the listing goes
    on past it, and the crashed runs after it complete, each charge made
    once."""
    s = Store()
    try:
        s.demo("A-1")
        s.demo("A-2")
        for order in ("A-3", "A-4"):
            p = s.demo(order, crash_after=4)
            check(p.returncode == -signal.SIGKILL, "demo did not crash", p)
        damage_run_record(s.path, "A-2")
        doc, p = s.tool_json("--all", expect=2)
        ids = sorted(r["run_id"] for r in doc["runs"])
        check(ids == ["order-A-3", "order-A-4"], "--all stopped at the "
              "damaged record", doc, p.stderr)
        for r in doc["runs"]:
            check(r["status"] == "completed", "not completed", r)
        check([k["run_id"] for k in doc["skipped"]] == ["order-A-2"],
              "the damaged run is not named as skipped", doc)
        check("checksum" in doc["skipped"][0]["message"],
              "the skip does not say why", doc["skipped"][0])
        for order in ("A-1", "A-2", "A-3", "A-4"):
            check(len(charges_of(s, order)) == 1, "charged twice", order)
        p = s.tool("--all", expect=2)
        check("order-A-2" in p.stderr and "cannot be read" in p.stderr,
              "the text does not name the damaged run", p.stderr)
        check("0 crashed run(s) continued" in p.stdout, "a finished run "
              "was continued", p.stdout)
    finally:
        s.close()


def case_check():
    s = Store()
    try:
        s.demo("A-1")
        s.demo("A-2")
        p = s.demo("A-3", crash_after=5)  # running, owner gone
        check(p.returncode == -signal.SIGKILL, "demo did not crash")
        before_data = s.data_digest()
        before_fx = s.effect_lines()

        doc, _ = s.tool_json("--check", expect=0)
        check(doc["mode"] == "check" and len(doc["runs"]) == 3,
              "not every run checked", doc)
        by = {r["run_id"]: r for r in doc["runs"]}
        for rid in ("order-A-1", "order-A-2"):
            check(by[rid]["check"] == "ok" and by[rid]["status"] == "completed"
                  and by[rid]["code_changed"] == [], "unchanged code not ok",
                  by[rid])
            check(by[rid]["calls_served"] == 3, "not served", by[rid])
        check(by["order-A-3"]["check"] == "ok"
              and by["order-A-3"]["status"] == "running"
              and "record ends" in by["order-A-3"]["note"],
              "a crashed run does not check as clean so far", by["order-A-3"])

        v1 = build_id(ARGS.order_plugin)
        v2 = build_id(ARGS.order_plugin_v2)
        check(v1 != v2, "the two plugins have one build-id")
        doc, p = s.tool_json("--check", plugins=[ARGS.order_plugin_v2],
                             expect=5)
        by = {r["run_id"]: r for r in doc["runs"]}
        for rid, order in (("order-A-1", "A-1"), ("order-A-2", "A-2")):
            r = by[rid]
            check(r["check"] == "diverged", "v2 does not diverge", r)
            d = r["divergence"]
            check(d["step_id"] == "0:4" and d["invocation"] == "0"
                  and d["position"] == 4, "wrong divergence position", d)
            rec, new = d["recorded"], d["new"]
            check(rec["type"] == "action_call" and new["type"] == "action_call"
                  and rec["actor"] == "order" and new["actor"] == "order",
                  "wrong steps", d)
            check(json.loads(rec["payload"]) ==
                  {"policy": "ship",
                   "payload": {"order_id": order, "reservation": "R-" + order}},
                  "wrong recorded payload", rec)
            check(json.loads(new["payload"])["payload"]["express"] is True,
                  "wrong new payload", new)
            check(rec["code"] == v1 and new["code"] == v2,
                  "wrong code identities", d, v1, v2)
            check(r["code_changed"][0]["recorded_code"] == v1
                  and r["code_changed"][0]["new_code"] == v2,
                  "code change not listed", r)
            check("non-determinism" in r["message"], "no message", r)
        # A-3 crashed before the changed call: it still replays cleanly
        check(by["order-A-3"]["check"] == "ok", "A-3 diverged", by)
        p = s.tool("--check", plugins=[ARGS.order_plugin_v2], expect=5)
        check("first divergence at step 0:4" in p.stdout and v1 in p.stdout
              and v2 in p.stdout, "text report lacks the divergence", p.stdout)

        # one run only
        doc, _ = s.tool_json("--check", "--run", "order-A-1", expect=0)
        check([r["run_id"] for r in doc["runs"]] == ["order-A-1"],
              "--check --run checked others", doc)
        doc, _ = s.tool_json("--check", "--run", "order-A-2",
                             plugins=[ARGS.order_plugin_v2], expect=5)
        check(doc["runs"][0]["check"] == "diverged", "not diverged", doc)

        # --run on a completed run under changed code: it diverges
        p = s.tool("--run", "order-A-1", plugins=[ARGS.order_plugin_v2],
                   expect=5)
        check("non-determinism" in p.stderr, "divergence not explained",
              p.stderr)

        # a full disk under the output: exit 2 and a line, not exit 0
        # with the summaries lost
        for args in (["--check", "--run", "order-A-1"],
                     ["--check", "--run", "order-A-1", "--json"]):
            with open("/dev/full", "w") as full:
                p = subprocess.run([ARGS.tool, s.path, "--plugin",
                                    ARGS.order_plugin] + args, stdout=full,
                                   stderr=subprocess.PIPE, text=True,
                                   env=s.env, timeout=120)
            # ... and which runs' summaries it took with it
            check(p.returncode == 2 and p.stderr == "ledger-replay: cannot "
                  "write the output: No space left on device\nledger-replay: "
                  "the summaries of 1 run(s) were lost with it: order-A-1 "
                  "(ledger-dump STORE --run ID says what each is now)\n",
                  "output lost without a word", args, p.returncode, p.stderr)
        # its help too (longer than stdio's buffer: the failed write's
        # reason is gone by the last flush)
        with open("/dev/full", "w") as full:
            p = subprocess.run([ARGS.tool, "--help"], stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=120)
        check(p.returncode == 2 and p.stderr.startswith(
              "ledger-replay: cannot write the output: "),
              "help lost without a word", p.returncode, p.stderr)

        # nothing was executed or written by any of it
        check(s.data_digest() == before_data, "a check wrote to the store")
        check(s.effect_lines() == before_fx, "a check executed a call")
    finally:
        s.close()


def case_check_code_changed_but_clean():
    s = Store()
    try:
        s.helper("start", ARGS.plugin, "approval", "ap-1",
                 '{"order": "A-1"}')
        s.tool("--resume", "ap-1", "--answer", '{"approved": true}',
               plugins=[ARGS.plugin], expect=0)
        a, b = build_id(ARGS.plugin), build_id(ARGS.plugin_b)
        check(a != b, "the two builds have one build-id")
        doc, _ = s.tool_json("--check", plugins=[ARGS.plugin_b], expect=0)
        r = doc["runs"][0]
        check(r["check"] == "ok", "other code that replays the same is not "
              "ok", r)
        cc = r["code_changed"]
        check(len(cc) == 1 and cc[0]["recorded_code"] == a
              and cc[0]["new_code"] == b and cc[0]["calls"] == 2,
              "the code change is not listed", cc, a, b)
        p = s.tool("--check", plugins=[ARGS.plugin_b], expect=0)
        check("recorded by other code that replays the same" in p.stdout,
              "text report does not say so", p.stdout)
    finally:
        s.close()


def case_resume():
    s = Store()
    try:
        P = [ARGS.plugin]
        for rid in ("ap-1", "ap-2", "ap-3", "ap-4"):
            p = s.helper("start", ARGS.plugin, "approval", rid,
                         '{"order": "%s"}' % rid)
            check(p.stdout == "suspended\n", "did not suspend", p.stdout)
        check(len(s.effect_lines("note ")) == 4, "notes before suspending")

        # --run on a suspended run says how to resume it, exit 4
        doc, p = s.tool_json("--run", "ap-1", plugins=P, expect=4)
        r = doc["runs"][0]
        check(r["status"] == "suspended" and r["suspended_path"] == "0.2"
              and len(r["resume_token"]) == 32, "no token reported", r)
        check("--resume" in p.stderr, "no hint to resume", p.stderr)
        token = r["resume_token"]

        # bad answers: exit 1, the run still waits
        # a string holding \u0000 would be cut at its NUL, as would a file
        # at a NUL byte: refused, saying where
        nul_file = os.path.join(s.dir, "nul.json")
        with open(nul_file, "wb") as f:
            f.write(b'{"approved": true}\x00{"approved": false}')
        for answer, word in (('{"approved": tru', "not JSON"),
                             ("[1, 2]", "JSON object"),
                             ('"yes"', "JSON object"),
                             ("", "not JSON"),
                             ('{"a": 1} trailing', "not one JSON value"),
                             ('{"approved": "no\\u0000 yes"}',
                              "the string at '/approved' holds \\u0000")):
            p = s.tool("--resume", "ap-1", "--answer", answer, plugins=P,
                       expect=1)
            check(word in p.stderr and "--answer" in p.stderr,
                  "bad answer not explained", answer, p.stderr)
        p = s.tool("--resume", "ap-1", "--answer", "@" + nul_file, plugins=P,
                   expect=1)
        check("nul.json" in p.stderr and "a NUL byte (at byte 18)" in p.stderr,
              "a NUL byte in the answer's file not explained", p.stderr)
        p = s.tool("--resume", "ap-1", "--answer", '{"approved": true}',
                   "--token", "0" * 32, plugins=P, expect=1)
        check("token" in p.stderr, "wrong token not explained", p.stderr)
        p = s.tool("--resume", "ap-1", "--answer",
                   "@" + os.path.join(s.dir, "missing.json"), plugins=P,
                   expect=1)
        check("missing.json" in p.stderr, "missing file not named", p.stderr)
        doc, _ = s.tool_json("--run", "ap-1", plugins=P, expect=4)
        check(doc["runs"][0]["resume_token"] == token, "the token changed")

        # with the token given
        doc, _ = s.tool_json("--resume", "ap-1", "--token", token, "--answer",
                             '{"approved": true}', plugins=P, expect=0)
        r = doc["runs"][0]
        check(r["status"] == "completed" and r["result"] == {"approved": True},
              "resume did not complete", r)
        check(r["calls_served"] == 1 and r["calls_executed"] == 2,
              "the note before the question ran again", r)
        check(s.effect_lines("note ap-1/0:0 ") == ["note ap-1/0:0 asked"]
              and s.effect_lines("note ap-1/0:4 ")
              == ["note ap-1/0:4 approved"], "wrong notes", s.effect_lines())
        s.helper("verify", "ap-1")
        # resuming it again: it is not suspended
        p = s.tool("--resume", "ap-1", "--answer", "{}", plugins=P, expect=1)
        check("not suspended" in p.stderr, "not explained", p.stderr)

        # without a token; the answer from a file
        f = os.path.join(s.dir, "answer.json")
        with open(f, "w") as fh:
            fh.write('{"approved": false, "by": "ops"}\n')
        doc, _ = s.tool_json("--resume", "ap-2", "--answer", "@" + f,
                             plugins=P, expect=0)
        check(doc["runs"][0]["result"] == {"approved": False}, "wrong result",
              doc)
        # the answer on stdin
        doc, _ = s.tool_json("--resume", "ap-3", "--answer", "-", plugins=P,
                             stdin='{"approved": true}', expect=0)
        check(doc["runs"][0]["result"] == {"approved": True}, "wrong result",
              doc)
        p = s.tool("--resume", "ap-3", "--answer", "{}", plugins=P, expect=1)

        # a run that fails: exit 5, with its reason
        s.helper("start", ARGS.plugin, "approval", "bad", '{"fail": true}')
        doc, p = s.tool_json("--run", "bad", plugins=P, expect=5)
        r = doc["runs"][0]
        check(r["status"] == "failed" and r["error"] == "PL_EPOLICY"
              and r["reason"], "failure not reported", r)
        # --all with a suspended run and a failed one: neither is running
        doc, _ = s.tool_json("--all", plugins=P, expect=0)
        check(doc["runs"] == [], "--all touched a run that is not running",
              doc)
        # the check passes over suspended and failed runs alike
        doc, _ = s.tool_json("--check", plugins=P, expect=0)
        by = {r["run_id"]: r for r in doc["runs"]}
        check(by["ap-4"]["check"] == "ok" and by["bad"]["check"] == "ok",
              "suspended or failed runs do not check", by)
    finally:
        s.close()


def case_fork():
    s = Store()
    try:
        s.demo("F-1")
        run_id = "order-F-1"
        head = s.helper("head", run_id).stdout
        doc, _ = s.tool_json("--fork", run_id, "--at", "0:2", "--new-id",
                             "fork-1", expect=0)
        r = doc["runs"][0]
        check(r["run_id"] == "fork-1" and r["status"] == "completed"
              and r["forked_from"] == run_id and r["forked_at"] == "0:2",
              "fork not reported", r)
        check(r["calls_served"] == 1 and r["calls_executed"] == 2,
              "the fork did not serve the reservation and run the rest", r)
        check(len(charges_of(s, "F-1")) == 2, "the fork did not charge anew")
        check(any(l.startswith("charge_card fork-1/0:2 ")
                  for l in s.effect_lines()), "the fork's charge has the "
              "fork's key", s.effect_lines())
        check(not any(l.startswith("reserve_stock fork-1/")
                      for l in s.effect_lines()),
              "the fork reserved again", s.effect_lines())
        s.helper("verify", "fork-1")
        s.helper("verify", run_id)
        check(s.helper("head", run_id).stdout == head, "the old run changed")
        check(s.helper("head", "fork-1").stdout != head,
              "the fork has the old run's head")

        # continued with the code loaded now: v2 ships express
        doc, _ = s.tool_json("--fork", run_id, "--at", "0:4", "--new-id",
                             "fork-2", plugins=[ARGS.order_plugin_v2],
                             expect=0)
        check(doc["runs"][0]["calls_served"] == 2, "not served", doc)
        s.tool("--check", "--run", "fork-2", plugins=[ARGS.order_plugin_v2],
               expect=0)
        s.tool("--check", "--run", "fork-2", expect=5)
        s.tool("--check", "--run", run_id, expect=0)

        # refusals
        for args, code, word in (
                (["--at", "0:99"], 1, "no step 0:99"),
                (["--at", "0.1:0"], 1, "root ledger"),
                (["--at", "banana"], 1, "bad step id"),
                (["--at", "0:1", "--new-id", "fork-1"], 1, "exists"),
                (["--at", "0:1", "--new-id", "bad id!"], 1, "bad new run id")):
            p = s.tool("--fork", run_id, *args, expect=code)
            check(word in p.stderr, "fork refusal not explained", args,
                  p.stderr)
        check(s.helper("head", run_id).stdout == head, "the old run changed")
        p = s.tool("--fork", "nope", "--at", "0:1", expect=2)
    finally:
        s.close()


def case_submit_to_a_full_store():
    """A store that cannot grow (the file size limit standing in for a full
    disk) refuses --submit with exit 2, the store's fault, naming the cause;
    nothing is queued, and once the limit is gone the same submit works."""
    s = Store()
    try:
        order = '{"order_id": "A-1", "items": [1], "amount_cents": 100}'
        s.tool("--submit", "order", "--payload", order, expect=0)
        big = ('{"order_id": "A-2", "items": [1], "amount_cents": 100, '
               '"note": "%s"}' % ("x" * 100000))

        def small_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (65536, resource.RLIM_INFINITY))

        p = s.tool("--submit", "order", "--payload", big, "--new-id", "A-2",
                   preexec=small_files, expect=2)
        check("EFBIG" in p.stderr and "PL_ENOSPC" in p.stderr,
              "the message does not name the cause", p.stderr)
        s.tool("--submit", "order", "--payload", big, "--new-id", "A-2",
               expect=0)
    finally:
        s.close()


def case_submit_with_priority_and_key():
    """--submit --priority and --key: one worker drains the queue higher
    priority first, in the order they were submitted within a priority;
    runs with a key keep their place within it."""
    s = Store()
    worker = None
    try:
        subs = [("A-1", "0", None), ("A-2", "5", None), ("A-3", "-1", None),
                ("A-4", "5", "tenant-1"), ("A-5", "0", "tenant-1")]
        for order, prio, key in subs:
            payload = ('{"order_id": "%s", "items": [1], "amount_cents": 100}'
                       % order)
            args = ["--submit", "order", "--payload", payload, "--new-id",
                    order, "--priority", prio]
            if key:
                args += ["--key", key, "--key-limit", "1"]
            p = s.tool(*args, expect=0)
            check(p.stdout.strip() == order, "--submit printed", p.stdout)
        env = dict(os.environ)
        env.update(s.env)
        worker = subprocess.Popen(
            [ARGS.tool, s.path, "--plugin", ARGS.order_plugin, "--worker",
             "--concurrency", "1"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        for _ in range(6000):
            if len(s.effect_lines("charge_card ")) == len(subs):
                break
            time.sleep(0.01)
        got = [l.rsplit(" for ", 1)[1]
               for l in s.effect_lines("charge_card ")]
        check(got == ["A-2", "A-4", "A-1", "A-5", "A-3"],
              "the queue did not drain by priority", got)
    finally:
        if worker:
            worker.terminate()
            worker.wait(timeout=60)
        s.close()


def case_time():
    """--signal, --cancel and --wake; ledger-dump is not needed here."""
    s = Store()
    try:
        P = [ARGS.plugin]
        for rid in ("aw-1", "aw-2", "aw-3"):
            p = s.helper("start", ARGS.plugin, "await", rid, "{}")
            check(p.stdout == "waiting\n", "did not wait", p.stdout)
        p = s.helper("start", ARGS.plugin, "await", "aw-4",
                     '{"timeout": 1}')
        # usage errors
        for argv in (["--signal", "aw-1", "--payload", "{}"],  # no --name
                     ["--signal", "aw-1", "--name", "go"],     # no --payload
                     ["--cancel", "aw-1", "--name", "go"],
                     ["--run", "aw-1", "--reason", "x"],
                     ["--signal", "aw-1", "--name", "go", "--payload", "[1]"]):
            s.tool(*argv, plugins=P, expect=1)
        # a name the engine refuses is said before the store opens: it
        # said "no store" for a path with none, whatever the name
        for name in ("", "a\tb", "n" * 256):
            p = run([ARGS.tool, s.path + ".none", "--signal", "aw-1",
                     "--name", name, "--payload", "{}"], env=s.env, expect=1)
            check(p.stderr.startswith("ledger-replay: --name: an event name "
                                      "is 1..255 bytes"), "no --name error",
                  p.stderr)
        # a signal with the plugin loaded continues the run here
        doc, _ = s.tool_json("--signal", "aw-1", "--name", "go",
                             "--payload", '{"n": 1}', plugins=P, expect=0)
        r = doc["runs"][0]
        check(r["status"] == "completed" and r["result"] == {"got": {"n": 1}},
              "the signal did not end the wait", r)
        # without plugins it is delivered only; --wake then continues it
        p = run([ARGS.tool, s.path, "--signal", "aw-2", "--name", "go",
                 "--payload", '{"n": 2}'], env=s.env, expect=0)
        check("delivered" in p.stdout, "not delivered", p.stdout)
        p = s.tool("--wake", plugins=P, expect=0)
        check("next due" in p.stdout, "no next due time", p.stdout)
        # each run it continued is summed up, as --run sums it up
        check("run aw-2: completed\n  calls served from the ledger 1, "
              "executed 0; " in p.stdout and '  result {"got":{"n":2}}\n'
              in p.stdout, "--wake did not say what it continued", p.stdout)
        doc, _ = s.tool_json("--run", "aw-2", plugins=P, expect=0)
        check(doc["runs"][0]["result"] == {"got": {"n": 2}},
              "--wake did not continue the signalled run", doc)
        # the timed-out one: woken, and recorded
        doc, _ = s.tool_json("--run", "aw-4", plugins=P, expect=0)
        check(doc["runs"][0]["result"] == {"timeout": True},
              "no timeout", doc)
        # --run on a waiting run says what it waits for, exit 4
        doc, p = s.tool_json("--run", "aw-3", plugins=P, expect=4)
        r = doc["runs"][0]
        check(r["status"] == "waiting" and r["wait_event"] == "go"
              and r["wake_ms"] is None, "waiting not reported", r)
        p = s.tool("--run", "aw-3", plugins=P, expect=4)
        check("waiting at 0 for the event 'go'" in p.stdout,
              "no waiting line", p.stdout)
        # a cancel: the waiting run compensates and ends cancelled
        p = s.tool("--cancel", "aw-3", "--reason", "no longer needed",
                   plugins=P, expect=5)
        check("run aw-3: cancelled\n" in p.stdout, "not cancelled", p.stdout)
        check(len([l for l in s.effect_lines("note ")
                   if l.endswith(" cancelled")]) == 1,
              "the compensating note", s.effect_lines())
        # ended runs refuse both, exit 1, and the message says why
        p = s.tool("--cancel", "aw-3", plugins=P, expect=1)
        check("has ended (cancelled)" in p.stderr, "no reason", p.stderr)
        p = s.tool("--signal", "aw-1", "--name", "go", "--payload", "{}",
                   plugins=P, expect=1)
        check("has ended (completed)" in p.stderr, "no reason", p.stderr)
        p = s.tool("--cancel", "nope", plugins=P, expect=2)
        # cancelled where its plugin was not loaded: --wake ends it, says
        # so, and exits 5 as --run would; with nothing due, exit 0
        s.helper("start", ARGS.plugin, "await", "aw-5", "{}")
        run([ARGS.tool, s.path, "--cancel", "aw-5", "--reason", "gone"],
            env=s.env, expect=0)
        doc, _ = s.tool_json("--wake", plugins=P, expect=5)
        check([(r["run_id"], r["status"], r["reason"])
               for r in doc["runs"]] == [("aw-5", "cancelled", "gone")]
              and doc["summary"]["next_due_ms"] == 0, "--wake --json", doc)
        doc, _ = s.tool_json("--wake", plugins=P, expect=0)
        check(doc["runs"] == [] and doc["summary"]["next_due"] is None,
              "a second --wake continued something", doc)
    finally:
        s.close()


def flip_every(path, marker):
    """Flip a bit of every copy in the file of the bytes @marker: the record
    holding them fails its checksum (PL_ECORRUPT)."""
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    at, hit = raw.find(marker), 0
    while at >= 0:
        raw[at] ^= 0x01
        hit += 1
        at = raw.find(marker, at + 1)
    check(hit > 0, "%r not found in the file" % marker)
    with open(path, "wb") as f:
        f.write(raw)


def case_wake_with_a_failing_schedule():
    """--wake whose schedule fails to fire (its record damaged) wakes the
    due runs all the same and says so: each run summed up, the schedule
    named with its error, exit 3 (docs/tools.md); not "cannot wake"."""
    s = Store()
    try:
        P = [ARGS.plugin]
        for rid in ("nap-1", "nap-2"):
            p = s.helper("start", ARGS.plugin, "nap", rid, '{"ms": 1500}')
            check(p.stdout == "waiting\n", "did not wait", rid, p.stdout)
        s.tool("--schedule-put", "broken", "--cron", "0 0 1 1 *", "--policy",
               "nap", "--payload", '{"ms": 1, "mark": "flip-me-here"}',
               plugins=P, expect=0)
        flip_every(s.path, b"flip-me-here")
        time.sleep(1.6)  # the naps' timers come due
        doc, p = s.tool_json("--wake", plugins=P, expect=3)
        check(sorted((r["run_id"], r["status"]) for r in doc["runs"])
              == [("nap-1", "completed"), ("nap-2", "completed")],
              "the due runs were not woken", doc, p.stderr)
        sf = doc["summary"]["schedule_failed"]
        check(sf is not None and sf["schedule"] == "broken"
              and sf["error"] == "PL_ECORRUPT"
              and sf["message"].startswith("schedule 'broken'"),
              "the failed schedule not named with its error", doc)
        check(doc["summary"]["woken"] == 2, "the runs woken not counted", doc)
        check("cannot wake" not in p.stderr, "said it could not wake",
              p.stderr)
        check(re.search(r"^ledger-replay: schedule \"broken\" failed: .+ "
                        r"\(PL_ECORRUPT\); the 2 due run\(s\) were woken "
                        r"all the same$", p.stderr, re.M),
              "no line naming the schedule", p.stderr)
        # in text, with nothing left due: the same schedule, exit 3
        p = s.tool("--wake", plugins=P, expect=3)
        check('schedule "broken" failed: ' in p.stderr
              and "the 0 due run(s) were woken" in p.stderr
              and "next due: " in p.stdout, "--wake in text", p.stdout,
              p.stderr)
        # the schedule gone, nothing failed: exit 0
        s.tool("--schedule-delete", "broken", plugins=P, expect=0)
        doc, p = s.tool_json("--wake", plugins=P, expect=0)
        check(doc["summary"]["schedule_failed"] is None
              and doc["summary"]["woken"] == 0, "a clean --wake", doc)
    finally:
        s.close()


def case_check_and_upgrade_go_past_a_damaged_run_record():
    """--check, the deploy gate and --upgrade --all-diverged pass over a run
    whose record cannot be read and go on with the others, as --all does,
    exit 2: they stopped at it, checking nothing ("runs": []), and the gate
    said neither PASS nor FAIL.  The gate fails: nothing says that run
    replays."""
    s = Store()
    try:
        P = [ARGS.order_plugin]
        s.demo("A-1")
        s.demo("A-2")
        p = s.demo("L-1", crash_after=4)
        check(p.returncode == -signal.SIGKILL, "demo did not crash", p)
        damage_run_record(s.path, "A-2")
        doc, p = s.tool_json("--check", plugins=P, expect=2)
        check(sorted((r["run_id"], r["check"]) for r in doc["runs"])
              == [("order-A-1", "ok"), ("order-L-1", "ok")]
              and [k["run_id"] for k in doc["skipped"]] == ["order-A-2"]
              and doc["skipped"][0]["reason"] == "its record cannot be read",
              "--check did not go past it", doc)
        p = s.tool("--check", "--live", plugins=P, expect=2)
        check("checked 1 live run(s): 1 ok, 0 diverged, 0 failed to replay, "
              "and runs whose record cannot be read (above)\n" in p.stdout
              and "deploy gate: FAIL: 1 run(s) whose record cannot be read, "
              "not checked: order-A-2\n" in p.stdout
              and "PASS" not in p.stdout, "the gate", p.stdout, p.stderr)
        doc, _ = s.tool_json("--check", "--live", plugins=P, expect=2)
        g = doc["summary"]["gate"]
        check(not g["pass"] and g["unreadable"] == ["order-A-2"]
              and g["would_fail"] == [] and g["live_runs"] == 1,
              "the gate in JSON", g)
        p = s.tool("--upgrade", "--all-diverged", "--dry-run", plugins=P,
                   expect=2)
        check(p.stdout.endswith("1 run(s) not final or failed: 1 replay "
                                "under the loaded code, 0 diverged, and runs "
                                "whose record cannot be read (above)\n"),
              "--upgrade --all-diverged", p.stdout, p.stderr)
    finally:
        s.close()


def case_check_a_run_newer_code_recorded():
    """--check under older code: a run a newer build recorded (version 2
    of "rolling", this code knowing 1) needs newer code; not a failure,
    not in the deploy gate's would_fail."""
    s = Store()
    try:
        P = [ARGS.plugin]
        s.env["REPLAY_CODE_VERSION"] = "2"
        p = s.helper("start", ARGS.plugin, "gated", "new-1", "{}")
        check(p.stdout == "suspended\n", "did not suspend", p.stdout)
        s.env["REPLAY_CODE_VERSION"] = "1"
        doc, _ = s.tool_json("--check", "--live", plugins=P, expect=0)
        r = doc["runs"][0]
        check(r["check"] == "needs_newer_code" and r["status"] == "suspended"
              and "by newer code" in r["message"], "wrong verdict", r)
        g = doc["summary"]["gate"]
        check(g["pass"] and g["would_fail"] == [], "the gate fails", g)
        p = s.tool("--check", plugins=P, expect=0)
        check("check new-1 (suspended): needs_newer_code" in p.stdout and
              "1 run(s) need newer code" in p.stdout and
              "0 failed to replay" in p.stdout,
              "text report does not say so", p.stdout)
        # the newer code replays it cleanly
        s.env["REPLAY_CODE_VERSION"] = "2"
        doc, _ = s.tool_json("--check", plugins=P, expect=0)
        check(doc["runs"][0]["check"] == "ok", "newer code fails", doc)
        # answered, then continued, under the older code: refused, left
        # for the newer (exit 1, as a run a live process owns), not a
        # failure (it exited 5)
        s.env["REPLAY_CODE_VERSION"] = "1"
        p = s.tool("--resume", "new-1", "--answer", '{"approved": true}',
                   plugins=P, expect=1)
        check("by newer code" in p.stderr, "--resume does not say why",
              p.stderr)
        for mode in (["--run", "new-1"], ["--all"]):
            doc, _ = s.tool_json(*mode, plugins=P, expect=1)
            r = doc["runs"][0]
            check(r["status"] == "not_run" and r["error"] == "PL_ENEWERCODE",
                  "%s: not refused" % mode, doc)
        s.env["REPLAY_CODE_VERSION"] = "2"
        doc, _ = s.tool_json("--run", "new-1", plugins=P, expect=0)
        check(doc["runs"][0]["status"] == "completed", "newer code fails",
              doc)
    finally:
        s.close()


def case_check_a_completed_run_new_code_goes_on_past():
    """--check of a completed run that the loaded code would take further
    (a call past the end of its record): it said "ok, replays cleanly up
    to where its record ends" with exit 0, where the code would not
    complete the run the same way: a code change, diverged (exit 5).  A
    run not yet ended that does so is still ok so far."""
    s = Store()
    try:
        P = [ARGS.plugin]
        p = s.helper("start", ARGS.plugin, "extends", "ext-1", "{}")
        check(p.stdout == "completed\n", "did not complete", p.stdout)
        p = s.helper("start", ARGS.plugin, "approval", "live-1",
                     '{"order": "A-9"}')
        check(p.stdout == "suspended\n", "did not suspend", p.stdout)
        doc, _ = s.tool_json("--check", plugins=P, expect=0)
        check([r["check"] for r in doc["runs"]] == ["ok", "ok"],
              "the code that recorded them does not replay them", doc)
        s.env["REPLAY_EXTEND"] = "1"
        doc, _ = s.tool_json("--check", "--run", "ext-1", plugins=P,
                             expect=5)
        r = doc["runs"][0]
        check(r["check"] == "diverged" and r["status"] == "completed"
              and "would not end it the same way" in r["note"]
              and r["message"], "not a divergence", r)
        p = s.tool("--check", plugins=P, expect=5)
        check("check ext-1 (completed): diverged, the loaded code goes on "
              "past where the record of the ended run stops" in p.stdout
              and "record ends" not in p.stdout.split("ext-1")[1]
              .split("\n")[0], "the text report says otherwise", p.stdout)
        check("check live-1 (suspended): ok" in p.stdout,
              "a live run's check changed", p.stdout)
    finally:
        s.close()


def case_upgrade_all_diverged_counts_refused_runs():
    """--upgrade --all-diverged under older code: a run a newer build
    recorded is refused (PL_ENEWERCODE, exit 1, left as it was); its last
    line counts it apart, so the counts add up ("2 run(s) ...: 1 replay,
    0 diverged" left it out), and --json has the summary."""
    s = Store()
    try:
        P = [ARGS.plugin]
        s.helper("start", ARGS.plugin, "gated", "old-1", "{}")
        s.env["REPLAY_CODE_VERSION"] = "2"
        s.helper("start", ARGS.plugin, "gated", "new-1", "{}")
        s.env["REPLAY_CODE_VERSION"] = "1"
        for extra in ([], ["--dry-run"]):
            p = s.tool("--upgrade", "--all-diverged", *extra, plugins=P,
                       expect=1)
            check(p.stdout.endswith(
                "2 run(s) not final or failed: 1 replay under the loaded "
                "code, 0 diverged, 1 refused (new-1: PL_ENEWERCODE)\n"),
                "the refused run is not counted", extra, p.stdout, p.stderr)
        doc, _ = s.tool_json("--upgrade", "--all-diverged", plugins=P,
                             expect=1)
        check(doc["summary"] == {"runs": 2, "replay": 1, "diverged": 0,
                                 "refused": [{"run_id": "new-1",
                                              "error": "PL_ENEWERCODE"}]},
              "--json's summary", doc)
        # the newer code replays both: nothing refused, exit 0
        s.env["REPLAY_CODE_VERSION"] = "2"
        p = s.tool("--upgrade", "--all-diverged", plugins=P, expect=0)
        check(p.stdout.endswith("2 run(s) not final or failed: 2 replay "
                                "under the loaded code, 0 diverged\n"),
              "newer code", p.stdout)
    finally:
        s.close()


def case_plugin_crashes_in_init():
    """A plugin that dies in pl_plugin_init takes the tool down with exit 2
    and a line naming the plugin, not a bare SIGSEGV; the store is not
    opened, let alone written."""
    s = Store()
    try:
        s.demo("K-1")
        with open(s.path, "rb") as f:
            before = f.read()
        crash = ARGS.crash_plugin
        for mode in (["--all"], ["--check"], ["--worker"]):
            p = s.tool(*mode, plugins=[ARGS.order_plugin, crash], expect=2)
            check("plugin_crash_init" in p.stderr and "SIGSEGV" in p.stderr
                  and "pl_plugin_init" in p.stderr,
                  "the crash does not name the plugin", p.stderr)
        with open(s.path, "rb") as f:
            check(f.read() == before, "the store changed")
    finally:
        s.close()


def case_check_on_a_read_only_file_system():
    """--check writes nothing, so a store on a read-only file system (a
    read-only bind mount in a mount namespace of its own) checks as any
    other.  Needs unshare(1) and the right to mount (root)."""
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if shutil.which("unshare") is None or probe.returncode != 0:
        print("  (no mount namespace to be had: read-only case left out)")
        return
    s = Store()
    try:
        s.demo("R-1")
        tool = [ARGS.tool, s.path, "--plugin", ARGS.order_plugin, "--check"]
        script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
                  '&& touch "$1/probe" 2>/dev/null && exit 9; shift; '
                  'exec "$@"')
        p = run(["unshare", "-m", "sh", "-c", script, "sh", s.dir] + tool)
        check(p.returncode == 0 and "1 ok" in p.stdout,
              "--check on a read-only file system", p.returncode, p.stdout,
              p.stderr)
    finally:
        s.close()


def case_run_on_a_full_store():
    """A store that cannot be written mid-run (the file size limit, below
    every data page, standing in for a full disk) stops --run with exit 2,
    the store's fault, naming the run once; the run is left running, and
    once the limit is gone --run finishes it."""
    s = Store()
    try:
        p = s.demo("F-1", crash_after=3)
        check(p.returncode == -signal.SIGKILL, "order-demo did not crash",
              p.returncode, p.stderr)

        def no_room():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (8192, resource.RLIM_INFINITY))

        p = s.tool("--run", "order-F-1", preexec=no_room, expect=2)
        check("PL_ENOSPC" in p.stderr, "the cause is not named", p.stderr)
        check(p.stderr.count("order-F-1") == 1,
              "the run is named more than once", p.stderr)
        check(len(p.stderr.strip().splitlines()) == 1, "not one line",
              p.stderr)
        doc, _ = s.tool_json("--run", "order-F-1", expect=0)
        check(doc["runs"][0]["status"] == "completed", "not finished", doc)
        check(len(charges_of(s, "F-1")) == 1, "charged twice")
    finally:
        s.close()


CASES = [case_time, case_check_and_upgrade_go_past_a_damaged_run_record, case_upgrade_all_diverged_counts_refused_runs, case_check_a_completed_run_new_code_goes_on_past, case_wake_with_a_failing_schedule, case_usage, case_bad_store, case_bad_plugin, case_crash_then_run,
         case_all_skips_a_live_owner, case_all_goes_past_a_damaged_run_record,
         case_all_counts_refused_runs_apart,
         case_check,
         case_check_code_changed_but_clean, case_resume, case_fork,
         case_submit_to_a_full_store, case_submit_with_priority_and_key,
         case_run_on_a_full_store,
         case_plugin_crashes_in_init, case_check_on_a_read_only_file_system,
         case_check_a_run_newer_code_recorded]


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    for name in ("tool", "demo", "order-plugin", "order-plugin-v2", "plugin",
                 "plugin-b", "helper", "failing-plugin", "no-entry-plugin",
                 "crash-plugin"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("cases", nargs="*")
    ARGS = ap.parse_args()
    return run_cases(CASES, ARGS.cases)


def run_cases(cases, only):
    """Run each case (those named in @only, if any), saying PASS or FAIL;
    the exit status: 1 if any failed."""
    failed = 0
    for case in cases:
        if only and case.__name__ not in only:
            continue
        try:
            case()
            print("PASS", case.__name__)
        except Failure as e:
            failed += 1
            print("FAIL", case.__name__ + ":", e)
        except Exception:
            failed += 1
            print("FAIL", case.__name__ + ":")
            traceback.print_exc(file=sys.stdout)
    print("%d case(s) failed" % failed if failed else "all cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
