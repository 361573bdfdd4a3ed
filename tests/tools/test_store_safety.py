#!/usr/bin/env python3
"""What an open, ledger-dump and ledger-replay may do to a file: nothing,
unless it is a whole policyledger store and the command is accepted.

usage: test_store_safety.py --dump D --replay R --probe P --fixture F
                            --plugin LIB.so --golden DIR

- another program's LMDB file: every tool and every open refuses it, and
  not a byte of it (nor of its lock file) changes; without its lock file,
  none is made;
- a store cut short at every length: no signal, a clear error, the file
  unchanged;
- a store made before stores carried their identity opens, and a
  read-write open adds the identity;
- refused commands (--submit, --import, --resume with a wrong token,
  ledger-dump on a file that is no store) leave every file as it was and
  make none; the modes that need a store refuse a missing one.
"""
import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

A = None
IDENTITY = b"policyledger store"
STRIDE = int(os.environ.get("PL_TEST_STRIDE") or 1)  # tests/support.h


def run(*cmd, timeout=120, stdin=None):
    p = subprocess.run([str(c) for c in cmd], capture_output=True,
                       timeout=timeout, input=stdin)
    return p.returncode, p.stdout.decode(errors="replace"), \
        p.stderr.decode(errors="replace")


def snapshot(d):
    """Every file below d, with the checksum of its bytes; an LMDB lock
    file by its name only (its bytes are LMDB's shared reader table, which
    any reader updates)."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            if f.endswith("-lock") or f == "lock.mdb":
                out[os.path.relpath(p, d)] = "lock"
                continue
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = hashlib.sha256(
                    fh.read()).hexdigest()
    return out


def replay(store, *args, **kw):
    return run(A.replay, store, "--plugin", A.plugin, *args, **kw)


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pl-safety-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def no_signal(self, rc, what):
        self.assertGreaterEqual(rc, 0, "%s died by signal %d" % (what, -rc))
        self.assertLess(rc, 128, "%s exited %d (a signal?)" % (what, rc))

    def assertUntouched(self, before, what):
        self.assertEqual(snapshot(self.dir), before,
                         "%s changed or made a file" % what)


class Foreign(Base):
    """Another program's LMDB file is never written."""

    def commands(self, f):
        return [
            ("ledger-dump", [A.dump, f]),
            ("ledger-dump --verify", [A.dump, f, "--verify"]),
            ("ledger-dump --stats", [A.dump, f, "--stats"]),
            ("--all", [A.replay, f, "--plugin", A.plugin, "--all"]),
            ("--check", [A.replay, f, "--plugin", A.plugin, "--check"]),
            ("--run", [A.replay, f, "--plugin", A.plugin, "--run", "x"]),
            ("--worker", [A.replay, f, "--plugin", A.plugin, "--worker"]),
            ("--submit", [A.replay, f, "--plugin", A.plugin, "--submit",
                          "approval", "--payload", '{"order":"A"}']),
            ("open ro", [A.probe, f, "ro"]),
            ("open rw", [A.probe, f, "rw"]),
            ("open rw-existing", [A.probe, f, "rw-existing"]),
        ]

    def check_refused(self, f, with_lock):
        before = snapshot(self.dir)
        for what, cmd in self.commands(f):
            rc, out, err = run(*cmd, timeout=60)
            self.no_signal(rc, what)
            self.assertNotEqual(rc, 0, "%s accepted a foreign file" % what)
            self.assertIn("another program", out + err, what)
            self.assertUntouched(before, "%s (lock file %s)" %
                                 (what, "there" if with_lock else "absent"))

    def test_foreign_file(self):
        for variant in ([], ["meta"]):
            f = self.path("other%s.db" % len(variant))
            rc, _, err = run(A.probe, f, "foreign", *variant)
            self.assertEqual(rc, 0, err)
            self.check_refused(f, True)
            os.unlink(f + "-lock")
            self.check_refused(f, False)
            self.assertFalse(os.path.exists(f + "-lock"))


class Identity(Base):
    def test_new_store_carries_identity(self):
        f = self.path("new.db")
        rc, out, err = replay(f, "--submit", "approval", "--payload",
                              '{"order":"A"}', "--new-id", "n1")
        self.assertEqual(rc, 0, err)
        with open(f, "rb") as fh:
            self.assertIn(IDENTITY, fh.read())

    def test_store_made_before_the_identity(self):
        f = self.path("old.db")
        shutil.copy(os.path.join(A.golden, "pre-identity.db"), f)
        open(f + "-lock", "wb").close()
        with open(f, "rb") as fh:
            self.assertNotIn(IDENTITY, fh.read())
        # a read-only open reads it and writes nothing
        before = snapshot(self.dir)
        rc, out, err = run(A.dump, f)
        self.assertEqual(rc, 0, err)
        for r in ("r-completed", "r-failed", "r-suspended", "r-crashed"):
            self.assertIn(r, out)
        rc, out, err = run(A.dump, f, "--verify")
        self.assertEqual(rc, 0, out + err)
        self.assertUntouched(before, "a read-only open")
        # a read-write open recognises it and adds the identity
        rc, out, err = run(A.probe, f, "rw-existing")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("run r-completed", out)
        with open(f, "rb") as fh:
            self.assertIn(IDENTITY, fh.read())
        rc, out, err = run(A.dump, f, "--verify")
        self.assertEqual(rc, 0, out + err)


class Truncated(Base):
    """A store cut short is refused before LMDB maps it: every length."""

    @classmethod
    def setUpClass(cls):
        cls.src_dir = tempfile.mkdtemp(prefix="pl-trunc-")
        cls.src = os.path.join(cls.src_dir, "whole.db")
        subprocess.run([A.fixture, cls.src, "many", "40"], check=True,
                       timeout=300)
        with open(cls.src, "rb") as fh:
            cls.data = fh.read()
        # the end of LMDB's last page, from the newer meta page
        import struct
        z = struct.calcsize("N")
        hdr = z + 8
        psize = struct.unpack_from("<I", cls.data, hdr + 8 + 2 * z)[0]
        metas = []
        for i in range(2):
            last, txn = struct.unpack_from(
                "<QQ", cls.data, i * psize + hdr + 24 + 12 * z)
            metas.append((txn, last))
        cls.used = (max(metas)[1] + 1) * psize
        cls.psize = psize

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.src_dir, ignore_errors=True)

    def lengths(self):
        full = len(self.data)
        # every page boundary; every STRIDE-th in the sanitizer builds
        n = set(range(0, self.used, self.psize * STRIDE))
        n |= set(range(0, full, 65536))
        n |= {1, 100, 4095, 4097, self.psize * 2 - 1, self.used - 1,
              self.used - 100, self.used, self.used + 1, full}
        n |= {8192, 20000, 65536, 120000, 150000}
        return sorted(x for x in n if 0 <= x <= full)

    def test_every_length(self):
        self.assertGreater(self.used, 150000, "the store is too small")
        refused = opened = 0
        f = self.path("cut.db")
        for length in self.lengths():
            for name in os.listdir(self.dir):
                os.unlink(self.path(name))
            with open(f, "wb") as fh:
                fh.write(self.data[:length])
            # a store's lock file is there while it is in use
            open(f + "-lock", "wb").close()
            whole = length >= self.used
            before = snapshot(self.dir)
            cmds = [("ledger-dump", [A.dump, f]),
                    ("--verify", [A.dump, f, "--verify"]),
                    ("--check", [A.replay, f, "--plugin", A.plugin,
                                 "--check"]),
                    ("open ro", [A.probe, f, "ro"]),
                    ("open rw-existing", [A.probe, f, "rw-existing"])]
            if length:  # an empty file is where an embedder makes a store
                cmds.append(("open rw", [A.probe, f, "rw"]))
            for what, cmd in cmds:
                rc, out, err = run(*cmd, timeout=60)
                self.no_signal(rc, "%s at %d bytes" % (what, length))
                if whole:
                    if what in ("ledger-dump", "open ro"):
                        self.assertEqual(rc, 0, "%s at %d: %s" %
                                         (what, length, out + err))
                        self.assertIn("m-40", out)
                    continue
                self.assertNotEqual(rc, 0, "%s opened %d bytes" %
                                    (what, length))
                text = out + err
                self.assertTrue(
                    "truncated" in text or "not an LMDB store" in text or
                    "empty file" in text or "damaged" in text,
                    "%s at %d bytes: %s" % (what, length, text))
                self.assertUntouched(before, "%s at %d bytes" %
                                     (what, length))
            if whole:
                opened += 1
            else:
                refused += 1
        print("truncation sweep: %d lengths refused, %d whole (of %d bytes, "
              "last page ends at %d)" % (refused, opened, len(self.data),
                                          self.used))
        self.assertGreater(refused, 40 // STRIDE)


class Refused(Base):
    """A refused command leaves every file as it was and makes none."""

    def test_submit_refused_creates_nothing(self):
        f = self.path("new.db")
        for payload, extra in (('[1, 2]', []), ('{"order": ', []),
                               ('{"order":"A"}', ["--new-id", "bad id!"]),
                               ('{"a":' * 40 + '1' + '}' * 40, [])):
            rc, out, err = replay(f, "--submit", "approval", "--payload",
                                  payload, *extra)
            self.assertEqual(rc, 1, err)
            self.assertEqual(os.listdir(self.dir), [], payload)
        rc, out, err = replay(f, "--submit", "no-such-policy", "--payload",
                              '{}')
        self.assertEqual(rc, 1, err)
        self.assertIn("no policy", err)
        self.assertEqual(os.listdir(self.dir), [])

    def make_export(self):
        src = self.path("src.db")
        rc, _, err = replay(src, "--submit", "approval", "--payload",
                            '{"order":"A"}', "--new-id", "a1")
        self.assertEqual(rc, 0, err)
        rc, _, err = replay(src, "--run", "a1")
        self.assertEqual(rc, 4, err)
        rc, out, err = run(A.dump, src, "--run", "a1", "--format", "jsonl")
        self.assertEqual(rc, 0, err)
        return src, out

    def test_import_refused_creates_nothing(self):
        src, export = self.make_export()
        lines = export.splitlines(True)
        bad = {
            "truncated": "".join(lines[:-1]),
            "cut mid-line": export[:len(export) - 20],
            "unknown format": export.replace('"format":2', '"format":99', 1),
            "changed record": export.replace('"order":"A"', '"order":"B"', 1),
            "empty": "",
        }
        # a derived (folded) step's line: any field edited
        at = next(i for i, l in enumerate(lines) if '"derived":true' in l)
        for what, old, new in (("derived payload", '"noted":"asked"',
                                '"noted":"ASKED"'),
                               ("derived actor", '"actor":"note"',
                                '"actor":"other"'),
                               ("derived time", '"time":"', '"time":"1')):
            edited = list(lines)
            edited[at] = edited[at].replace(old, new, 1)
            bad[what] = "".join(edited)
        for what, old, new in (("run steps", '"steps":5', '"steps":6'),
                               ("step time", '"time":"2', '"time":"1')):
            bad[what] = export.replace(old, new, 1)
        for what, text in bad.items():
            self.assertNotEqual(text, export, what)
            e = self.path("bad.jsonl")
            with open(e, "w") as fh:
                fh.write(text)
            before = snapshot(self.dir)
            for f in (self.path("new.db"), src):
                rc, out, err = run(A.replay, f, "--import", e)
                self.assertIn(rc, (1, 5), "%s: %s" % (what, err))
                if what.startswith("derived"):
                    self.assertEqual(rc, 5, err)
                    self.assertIn("line %d:" % (at + 1), err)
                self.assertUntouched(before, "--import of an export %s" %
                                     what)
            # from stdin too
            rc, out, err = run(A.replay, self.path("new.db"), "--import", "-",
                               stdin=text.encode())
            self.assertIn(rc, (1, 5), "%s: %s" % (what, err))
            self.assertUntouched(before, "--import - of an export %s" % what)
        # the good export, from stdin, imports
        rc, out, err = run(A.replay, self.path("new.db"), "--import", "-",
                           stdin=export.encode())
        self.assertEqual(rc, 0, err)

    def test_resume_with_a_wrong_token_writes_nothing(self):
        src, _ = self.make_export()
        before = snapshot(self.dir)
        for args in (["--token", "00"], ["--token", "x" * 32]):
            rc, out, err = replay(src, "--resume", "a1", "--answer",
                                  '{"approved": true}', *args)
            self.assertEqual(rc, 1, err)
            self.assertIn("PL_ETOKEN", err)
            self.assertUntouched(before, "--resume %s" % args)
        rc, out, err = replay(src, "--resume", "a1", "--answer", "[1]")
        self.assertEqual(rc, 1, err)
        self.assertUntouched(before, "--resume with a bad answer")

    def test_dump_makes_no_lock_file_next_to_other_files(self):
        for name, data in (("text.db", b"not a store\n" * 100),
                           ("zeros.db", b"\0" * 65536), ("empty.db", b"")):
            with open(self.path(name), "wb") as fh:
                fh.write(data)
        before = snapshot(self.dir)
        for name in ("text.db", "zeros.db", "empty.db"):
            for cmd in ([A.dump, self.path(name)],
                        [A.dump, self.path(name), "--verify"],
                        [A.replay, self.path(name), "--plugin", A.plugin,
                         "--check"],
                        [A.replay, self.path(name), "--plugin", A.plugin,
                         "--all"]):
                rc, out, err = run(*cmd)
                self.assertEqual(rc, 2, err)
                self.assertUntouched(before, " ".join(cmd[1:]))

    def test_modes_refuse_a_missing_store(self):
        f = self.path("missing.db")
        d = self.path("emptydir")
        os.mkdir(d)
        for store in (f, d):
            for args in (["--check"], ["--all"], ["--run", "x"],
                         ["--resume", "x", "--answer", "{}"],
                         ["--fork", "x", "--at", "0:1"], ["--worker"]):
                rc, out, err = replay(store, *args, timeout=60)
                self.assertEqual(rc, 2, "%s: %s" % (args, err))
                self.assertIn("no store at", err)
                self.assertEqual(sorted(os.listdir(self.dir)), ["emptydir"],
                                 args)
                self.assertEqual(os.listdir(d), [], args)


class Messages(Base):
    """User strings in messages are quoted, escaped and cut: a message is
    one line, sends no control sequence to the terminal, stays short."""

    def one_line(self, err, what):
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, "%s: %r" % (what, err))
        self.assertNotIn("\x1b", err, what)
        self.assertNotIn("\t", err, what)
        self.assertLess(len(err), 1400, what)

    def test_hostile_strings(self):
        src = self.path("s.db")
        rc, _, err = replay(src, "--submit", "approval", "--payload",
                            '{"order":"A"}', "--new-id", "a1")
        self.assertEqual(rc, 0, err)
        for bad in ("x\ny", "\x1b[31mred\x1b[0m", "é" * 5000 + "\n",
                    "r" * 10000, "\u009b31m"):
            for cmd in ([A.dump, src, "--run", bad],
                        [A.dump, src, "--run", bad, "--verify"],
                        [A.dump, src, "--bogus" + bad],
                        [A.replay, src, "--plugin", A.plugin, "--run", bad],
                        [A.replay, src, "--plugin", A.plugin, "--check",
                         "--run", bad],
                        [A.replay, src, "--plugin", A.plugin, "--resume", bad,
                         "--answer", "{}"],
                        [A.replay, src, "--plugin", A.plugin, "--fork", "a1",
                         "--at", bad],
                        [A.replay, src, "--plugin", A.plugin, "--submit", bad,
                         "--payload", "{}"],
                        [A.replay, src, "--plugin", A.plugin, "--submit",
                         "approval", "--payload", "{}", "--new-id", bad],
                        [A.replay, self.path(bad[:200]), "--plugin", A.plugin,
                         "--all"],
                        [A.dump, self.path(bad[:200])]):
                rc, out, err = run(*cmd)
                self.assertIn(rc, (1, 2), err)
                self.one_line(err, "%r" % cmd[1:4])


class FileSizeLimit(Base):
    """Past the file size limit (ulimit -f) a tool says so and exits; no
    SIGXFSZ kills it without a word, and the store it had stays whole."""

    def limited(self, limit, *cmd, stdout=subprocess.PIPE):
        import resource

        def cap():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        p = subprocess.run([str(c) for c in cmd], stdout=stdout,
                           stderr=subprocess.PIPE, timeout=120,
                           preexec_fn=cap)
        return p.returncode, p.stderr.decode(errors="replace")

    def test_a_store_or_an_output_past_the_limit(self):
        f = self.path("s.db")
        rc, err = self.limited(8192, A.replay, f, "--plugin", A.plugin,
                               "--submit", "approval", "--payload",
                               '{"order":"A"}', "--new-id", "a1")
        self.no_signal(rc, "--submit past the limit")
        self.assertEqual(rc, 2, err)
        self.assertIn("file size limit", err)
        rc, _, err = replay(f, "--submit", "approval", "--payload",
                            '{"order":"A"}', "--new-id", "a1")
        self.assertEqual(rc, 0, err)
        before = snapshot(self.dir)
        with open(self.path("out.jsonl"), "wb") as out:
            rc, err = self.limited(64, A.dump, f, "--run", "a1", "--format",
                                   "jsonl", stdout=out)
        self.no_signal(rc, "ledger-dump's output past the limit")
        self.assertNotEqual(rc, 0, err)
        self.assertIn("cannot write the output", err)
        after = snapshot(self.dir)
        after.pop("out.jsonl")
        before.pop("out.jsonl", None)
        self.assertEqual(before, after)
        rc, _, err = run(A.dump, f, "--verify")
        self.assertEqual(rc, 0, err)


PG = os.environ.get("PL_TEST_PG_URI")


@unittest.skipUnless(PG, "no PostgreSQL server (run under tests/pg_run.sh)")
class Pg(unittest.TestCase):
    """The same promises on PostgreSQL: a schema is a store's only if it
    carries the identity; a missing one is created only on purpose."""

    def sql(self, query):
        p = subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", PG,
                            "-c", query], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.strip()

    def schemas(self):
        return self.sql("SELECT string_agg(nspname, ',' ORDER BY nspname) "
                        "FROM pg_namespace")

    def store(self, schema):
        return PG + "&schema=" + schema

    def test_missing_schema_is_refused_and_not_created(self):
        before = self.schemas()
        tmp = tempfile.mkdtemp(prefix="pl-safety-")
        try:
            for args in (["--check"], ["--all"], ["--run", "x"],
                         ["--resume", "x", "--answer", "{}"],
                         ["--fork", "x", "--at", "0:1"], ["--worker"]):
                rc, out, pg_err = replay(self.store("typo"), *args,
                                         timeout=60)
                self.assertEqual(rc, 2, "%s: %s" % (args, pg_err))
                self.assertEqual(self.schemas(), before, args)
                # the same words as for a missing file
                f = os.path.join(tmp, "missing.db")
                rc2, _, lmdb_err = replay(f, *args, timeout=60)
                self.assertEqual(rc2, rc)
                self.assertIn("no store at", pg_err)
                self.assertEqual(pg_err.split('"')[-1],
                                 lmdb_err.split('"')[-1], args)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        # refused submits create no schema either
        for payload in ("[1]", "{", '{"a":' * 40 + "1" + "}" * 40):
            rc, _, err = replay(self.store("typo"), "--submit", "approval",
                                "--payload", payload)
            self.assertEqual(rc, 1, err)
        self.assertEqual(self.schemas(), before)
        # a submit creates it, with the identity
        rc, out, err = replay(self.store("fresh"), "--submit", "approval",
                              "--payload", '{"order":"A"}', "--new-id", "p1")
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.sql("SELECT v FROM fresh.meta WHERE k = "
                                  "'identity'"), "8101813454559079524")

    def test_connection_error_is_one_line(self):
        bad = "postgresql:///postgres?host=/nonexistent-dir&user=nobody"
        for cmd in ([A.dump, bad], [A.replay, bad, "--plugin", A.plugin,
                                    "--all"]):
            rc, out, err = run(*cmd)
            self.assertEqual(rc, 2, err)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertNotIn("\t", err)

    def test_worker_outlives_an_outage(self):
        """The server restarts under a worker with two runs in flight: the
        worker says once that it lost the store and once that it is back,
        with the cause, and finishes both runs at once, long before their
        leases (two minutes) would let anyone take them; no call's effect is
        missing, only a call in flight at the restart ran twice, the store
        verifies, and the worker stops on SIGTERM with exit 0."""
        store = self.store("outage")
        tmp = tempfile.mkdtemp(prefix="pl-outage-")
        effects = os.path.join(tmp, "effects")
        env = dict(os.environ, WORK_EFFECTS=effects, WORK_MS="200")
        try:
            for job in ("j1", "j2"):
                rc, _, err = run(A.replay, store, "--plugin", A.workers_plugin,
                                 "--submit", "job", "--payload",
                                 '{"job": "%s", "calls": 12}' % job,
                                 "--new-id", job)
                self.assertEqual(rc, 0, err)
            errf = open(os.path.join(tmp, "worker.err"), "w+")
            w = subprocess.Popen([A.replay, store, "--plugin",
                                  A.workers_plugin, "--worker",
                                  "--concurrency", "2", "--lease-ms",
                                  "120000"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=errf)
            try:
                def lines():
                    try:
                        with open(effects) as f:
                            return len(f.read().splitlines())
                    except OSError:
                        return 0
                deadline = time.monotonic() + 60
                while lines() < 4 and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertGreaterEqual(lines(), 4, "the runs did not start")
                subprocess.run(os.environ["PL_TEST_PG_RESTART"], shell=True,
                               check=True, timeout=120,
                               stdout=subprocess.DEVNULL)
                deadline = time.monotonic() + 90
                done = ""
                while time.monotonic() < deadline:
                    rc, done, _ = run(A.dump, store, "--status", "completed")
                    if rc == 0 and "j1" in done and "j2" in done:
                        break
                    time.sleep(0.2)
                self.assertIn("j1", done, "a cut-off run was left to its "
                              "lease")
                self.assertIn("j2", done, "a cut-off run was left to its "
                              "lease")
            finally:
                w.terminate()
                w.wait(timeout=60)
            self.assertEqual(w.returncode, 0, "the worker on SIGTERM")
            # nothing durable lost: every call's effect is there, and only
            # the call each run was in when the server went away ran twice
            with open(effects) as f:
                keys = [l.split()[0] for l in f if l.strip()]
            want = {"%s/0:%d" % (j, 2 * i) for j in ("j1", "j2")
                    for i in range(12)}
            self.assertEqual(set(keys), want)
            twice = [k for k in want if keys.count(k) > 1]
            self.assertLessEqual(len(twice), 2, twice)
            self.assertTrue(all(keys.count(k) == 2 for k in twice), keys)
            self.assertEqual(len({k.split("/")[0] for k in twice}),
                             len(twice), twice)
            rc, out, err = run(A.dump, store, "--verify")
            self.assertEqual(rc, 0, out + err)
            errf.seek(0)
            err = errf.read()
            errf.close()
            self.assertEqual(err.count("lost the store"), 1, err)
            self.assertEqual(err.count("the store is back"), 1, err)
            import re
            m = re.search(r"; (\d+) run\(s\) it cut off are taken back", err)
            self.assertTrue(m and int(m.group(1)) >= 1, err)
            print(err.strip())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_verify_that_loses_the_server_is_exit_2(self):
        """ledger-dump --verify whose server stops answering midway could
        not check the runs left: each is named on stderr, none is a fault,
        and the exit status is 2 (could not do it), not 3 (damage found).
        They were each printed as a FAULT (PL_ESTORE), exit 3: a store
        that could not be read taken for a store found damaged.  The check
        is held on a full pipe (it lists every run before it checks the
        first) while the server stops."""
        store = self.store("gone")
        rc, _, err = run(A.fixture, store, "many", "800")
        self.assertEqual(rc, 0, err)
        r, w = os.pipe()
        self.assertEqual(fcntl.fcntl(w, 1031, 4096), 4096)  # F_SETPIPE_SZ
        errf = tempfile.TemporaryFile()  # a line a run: more than a pipe
        p = subprocess.Popen([A.dump, store, "--verify"], stdout=w,
                             stderr=errf)
        os.close(w)
        try:
            with os.fdopen(r, "rb") as reader:
                while True:  # until the pipe is full: it waits to write
                    held = bytearray(4)
                    fcntl.ioctl(reader.fileno(), 0x541B, held)  # FIONREAD
                    if int.from_bytes(held, sys.byteorder) >= 4096:
                        break
                    self.assertIsNone(p.poll(), "it did not wait to write")
                    time.sleep(0.01)
                subprocess.run(os.environ["PL_TEST_PG_STOP"], shell=True,
                               check=True, timeout=120,
                               stdout=subprocess.DEVNULL)
                out = reader.read().decode()
            rc = p.wait(timeout=120)
            errf.seek(0)
            err = errf.read().decode()
        finally:
            errf.close()
            if p.poll() is None:
                p.kill()
                p.wait()
            subprocess.run(os.environ["PL_TEST_PG_RESTART"], shell=True,
                           check=True, timeout=120,
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # "not running"
        self.assertEqual(rc, 2, out[-300:] + err[-600:])
        self.assertNotIn("FAULT", out)
        self.assertIn('cannot check run "m-', err)
        m = re.search(r"(\d+) run\(s\) checked, 0 fault\(s\), (\d+) could "
                      r"not be read: the check is not whole", out)
        self.assertTrue(m, out[-300:])
        self.assertEqual(int(m.group(1)) + int(m.group(2)), 800, m.group(0))
        self.assertGreater(int(m.group(2)), 0)

    def test_foreign_schema_is_never_written(self):
        self.sql("CREATE SCHEMA other; CREATE TABLE other.things (x int); "
                 "INSERT INTO other.things VALUES (1)")
        tables = "SELECT string_agg(relname, ',' ORDER BY relname) FROM " \
                 "pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace " \
                 "WHERE nspname = 'other'"
        before = self.sql(tables)
        for cmd in ([A.dump, self.store("other")],
                    [A.replay, self.store("other"), "--plugin", A.plugin,
                     "--all"],
                    [A.replay, self.store("other"), "--plugin", A.plugin,
                     "--submit", "approval", "--payload", '{"order":"A"}'],
                    [A.probe, self.store("other"), "rw"],
                    [A.probe, self.store("other"), "ro"]):
            rc, out, err = run(*cmd)
            self.assertNotEqual(rc, 0, cmd)
            self.assertIn("another program", out + err)
            self.assertEqual(self.sql(tables), before, cmd)

    def test_store_made_before_the_identity(self):
        rc, out, err = replay(self.store("older"), "--submit", "approval",
                              "--payload", '{"order":"A"}', "--new-id", "o1")
        self.assertEqual(rc, 0, err)
        self.sql("DELETE FROM older.meta WHERE k = 'identity'")
        rc, out, err = run(A.dump, self.store("older"))
        self.assertEqual(rc, 0, err)
        self.assertIn("o1", out)
        self.assertEqual(self.sql("SELECT count(*) FROM older.meta WHERE k = "
                                  "'identity'"), "0")
        rc, out, err = run(A.probe, self.store("older"), "rw-existing")
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(self.sql("SELECT count(*) FROM older.meta WHERE k = "
                                  "'identity'"), "1")


def main():
    global A
    ap = argparse.ArgumentParser()
    for o in ("dump", "replay", "probe", "fixture", "plugin", "golden",
              "workers-plugin"):
        ap.add_argument("--" + o, required=True)
    A, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
