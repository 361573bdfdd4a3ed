#!/usr/bin/env python3
"""ledger-web on one long run: a run of 100,000 steps opened, a page deep
in it, its timeline and export, and a run with 8 MiB payloads, with the
server's memory.

    bench/web_run.py BUILD_DIR

Makes an LMDB store with tests/web_gen (--long 33333: 100,000 steps;
--big 8: three payloads of 8 MiB), starts ledger-web --read-only on it and
asks over HTTP on loopback.  The floor is GET /api/session, an answer that
reads nothing from the store, timed the same way in the same run.  Prints
the median of 9 of each (3 of the export), the answers' sizes, and the
server's own memory at its most (its anonymous pages, sampled after each
request).  Exit 0 when everything ran; nothing here passes or fails.
"""
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

build = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="pl-web-run-")
store = os.path.join(tmp, "store.mdb")
gen = os.path.join(build, "tests", "web_gen")
t0 = time.time()
subprocess.run([gen, store, "--long", "33333"], check=True,
               stdout=subprocess.DEVNULL)
subprocess.run([gen, store, "--big", "8"], check=True,
               stdout=subprocess.DEVNULL)
print("made the runs in %.1f s" % (time.time() - t0))
web = subprocess.Popen([os.path.join(build, "tools", "ledger-web"), store,
                        "--read-only", "--listen", "127.0.0.1:0"],
                       stdout=subprocess.PIPE, text=True)
u = urllib.parse.urlparse(web.stdout.readline().split()[-1])
anon_max = 0.0


def anon():
    with open("/proc/%d/status" % web.pid) as f:
        kv = dict(line.split(":", 1) for line in f)
    return int(kv["RssAnon"].split()[0]) / 1024


def get(path):
    global anon_max
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    t = time.perf_counter()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    ms = (time.perf_counter() - t) * 1e3
    c.close()
    if r.status != 200:
        raise SystemExit("GET %s: %d %s" % (path, r.status, body[:200]))
    anon_max = max(anon_max, anon())
    return ms, len(body)


def median(path, n=9):
    got = [get(path) for _ in range(n)]
    return statistics.median(ms for ms, _ in got), got[0][1]


rows = [
    ("floor: GET /api/session", "/api/session", 9),
    ("the run of 100,000 steps: its page (run, marks, first 200 steps)",
     "/api/runs/long-run", 9),
    ("200 steps from the middle (cursor 0:33333)",
     "/api/runs/long-run/steps?cursor=0:33333", 9),
    ("the last page", "/api/runs/long-run/steps?cursor=0:66600", 9),
    ("its timeline (its first 5,000 steps)", "/api/runs/long-run/timeline",
     9),
    ("its export (100,000 lines)", "/api/runs/long-run/export", 3),
    ("a run with three 8 MiB payloads: its page (cut to 2 KiB each)",
     "/api/runs/big-run", 9),
    ("one of them whole", "/api/runs/big-run/step?id=0.42:0", 9),
]
try:
    floor = None
    for label, path, n in rows:
        ms, size = median(path, n)
        floor = floor or ms
        print("%-66s %9.2f ms %8.1f kB%s" %
              (label, ms, size / 1024,
               "" if ms == floor else "  (%.0fx the floor)" % (ms / floor)))
    print("ledger-web's own memory, at most: %.1f MB (RssAnon)" % anon_max)
finally:
    web.terminate()
    web.wait()
    shutil.rmtree(tmp, ignore_errors=True)
