#!/usr/bin/env python3
"""ledger-web's run list on a large store: the first page, a page deep in
the list, a filtered page, the counts, the overview, and the server's
memory.

    bench/web_list.py BUILD_DIR [--runs N] [--store PATH] [--web BIN]

Makes (or reuses, with --store) an LMDB store of N runs (default 1,000,000)
with tests/web_gen, and adds to it, unless it holds them, a run of 100,000
steps ("long-run") and one with three payloads of 8 MiB ("big-run"): the
newest runs, whose steps the overview samples while they are in its last
hour.  Starts ledger-web --read-only (BIN, default the build's) on it and
asks over HTTP on loopback.  The floor is GET /api/session, an answer that
reads nothing from the store, timed the same way in the same run.  Prints
the median of 9 of each (of 3 for the overview, once the counts are
complete), what the overview read, and the server's own memory at its most
(its anonymous pages, sampled every 10 ms; the store's map is file pages
LMDB shares with the page cache).  The overview is asked of a second
server, started afresh, so that its memory is its own.  Exit 0 when
everything ran; nothing here passes or fails.
"""
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

build = sys.argv[1]
args = sys.argv[2:]
runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 1000000
store = args[args.index("--store") + 1] if "--store" in args else None
web_bin = (args[args.index("--web") + 1] if "--web" in args else
           os.path.join(build, "tools", "ledger-web"))
gen = os.path.join(build, "tests", "web_gen")
tmp = None
if not store:
    tmp = tempfile.mkdtemp(prefix="pl-web-bench-")
    store = os.path.join(tmp, "store.mdb")
if not os.path.exists(store):
    t0 = time.time()
    subprocess.run([gen, store, str(runs)], check=True,
                   stdout=subprocess.DEVNULL)
    print("made %d runs in %.1f s" % (runs, time.time() - t0))
for run_id, flags in (("long-run", ["--long", "33333"]),
                      ("big-run", ["--big", "8"])):
    held = subprocess.run([os.path.join(build, "tools", "ledger-dump"), store,
                           "--run", run_id], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0
    if not held:
        subprocess.run([gen, store] + flags, check=True,
                       stdout=subprocess.DEVNULL)

web = u = None


def serve():
    """Start ledger-web on the store; how long it took to print its URL."""
    global web, u
    t = time.time()
    web = subprocess.Popen([web_bin, store, "--read-only", "--listen",
                            "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    u = urllib.parse.urlparse(web.stdout.readline().split()[-1])
    return (time.time() - t) * 1e3


print("ledger-web started and printed its URL in %.0f ms" % serve())


def get(path):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    t = time.perf_counter()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    ms = (time.perf_counter() - t) * 1e3
    c.close()
    return ms, json.loads(body)


def median(path, n=9):
    return statistics.median(get(path)[0] for _ in range(n))


def rss():
    """The server's own memory (anonymous pages) and the store's pages
    mapped in (file pages: LMDB's map, shared with the page cache), MB."""
    with open("/proc/%d/status" % web.pid) as f:
        kv = dict(l.split(":", 1) for l in f)
    return (int(kv["RssAnon"].split()[0]) / 1024,
            int(kv["RssFile"].split()[0]) / 1024)


# the anonymous pages at their most, since the start and in a phase
peak = {"all": 0.0, "phase": 0.0}
done = threading.Event()


def sample():
    while not done.wait(0.01):
        try:
            a = rss()[0]
        except (OSError, ValueError, KeyError):
            continue  # between two servers
        peak["all"] = max(peak["all"], a)
        peak["phase"] = max(peak["phase"], a)


threading.Thread(target=sample, daemon=True).start()
try:
    first_cold = get("/api/runs?limit=50")[0]
    t0 = time.time()
    while not get("/api/runs?limit=1")[1]["counts_complete"]:
        time.sleep(0.1)
    counted = time.time() - t0
    floor = median("/api/session")
    first = median("/api/runs?limit=50")
    _, doc = get("/api/runs?limit=50")
    total = doc["counts_total"]
    cursor = doc["next_cursor"]
    for _ in range(20):  # 1,000 runs in
        _, doc = get("/api/runs?limit=50&cursor=" + cursor)
        cursor = doc["next_cursor"]
    deep = median("/api/runs?limit=50&cursor=" + cursor)
    failed = median("/api/runs?limit=50&status=failed")
    anon, mapped = rss()
    anon_max = max(peak["all"], anon)
    # the overview in a server of its own, so that its memory is its own
    # (the allocator keeps what the list's pages freed)
    web.terminate()
    web.wait()
    serve()
    while not get("/api/runs?limit=1")[1]["counts_complete"]:
        time.sleep(0.1)
    peak["phase"] = rss()[0]
    overview = median("/api/overview", 3)
    _, ov = get("/api/overview")
    ov_peak = peak["phase"]
    print("runs in the store                 %d" % total)
    print("floor: GET /api/session           %.2f ms" % floor)
    print("first page (50 runs), at start    %.2f ms" % first_cold)
    print("first page (50 runs)              %.2f ms  (%.1fx the floor)" %
          (first, first / floor))
    print("a page 1,000 runs in (cursor)     %.2f ms" % deep)
    print("first page of status=failed       %.2f ms" % failed)
    print("overview (last hour)              %.0f ms  (%d runs read, the "
          "steps of %d: %d steps)" % (overview, ov["scanned"], ov["sampled"],
                                      ov.get("sampled_steps", -1)))
    print("its own memory, a server answering the overview only, at most "
          "%.1f MB (RssAnon)" % ov_peak)
    print("counts complete, after the start  %.1f s" % counted)
    print("ledger-web's own memory, at most  %.1f MB (RssAnon; the store's"
          " map adds %.0f MB of file pages)" % (anon_max, mapped))
finally:
    done.set()
    web.terminate()
    web.wait()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
