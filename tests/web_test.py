#!/usr/bin/env python3
"""ledger-web's JSON API against the real server on loopback.

    web_test.py BUILD_DIR [--pg]

With --pg the store is the PostgreSQL server pg_run.sh started
(PL_TEST_PG_URI); else an LMDB store in a temporary directory.  The store is filled by
the order demo (a completed run, and one killed with SIGKILL mid-way), the
agent demo (a run suspended for approval), web_gen (10,000 runs, 500 on
PostgreSQL, and runs with hostile strings); then every endpoint is asked, every action taken,
and every refusal checked.  Exits non-zero at the first failure.
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

import web_attack

BUILD = sys.argv[1]
PG = os.environ["PL_TEST_PG_URI"] if sys.argv[2:] == ["--pg"] else None
WEB = os.path.join(BUILD, "tools", "ledger-web")
EX = os.path.join(BUILD, "examples")
# the pages over 10,000 runs on LMDB; on PostgreSQL, where each run made
# costs round trips, over 500 runs, in smaller pages
N_GEN = 500 if PG else 10000
PAGE = 50 if PG else 500
# a run of 6,001 steps (3 a call, and its result); on PostgreSQL of 3,001.
# Past every bound a run's steps meet in ledger-web but the summary's
# 200,000 (which reads it whole): its first page (200), a page's most
# (1,000), a search's and the list's walk of a run (2,000), the timeline
# (5,000).  A run of 100,000 steps passed no other bound, and took three
# fifths of the test's CPU (bench/web_run.py times ledger-web on one)
LONG_CALLS = 1000 if PG else 2000
HOSTILE = [
    "<script>alert(1)</script>",
    "\"onerror=alert(1) x=\"",
    "javascript:alert(document.cookie)",
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(2)</script>\u2028\u2029\\\"'`${x}",
]

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what, flush=True)
        raise SystemExit(1)


class Server:
    def __init__(self, store, *args, env=None):
        # stderr to a file: a pipe nobody reads could fill and stop it
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [WEB, store, "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE, stderr=self.err, text=True, env=env)
        line = self.proc.stdout.readline()
        if "http://" not in line:
            self.proc.wait()
        check("http://" in line, "ledger-web prints its URL: %r %s" %
              (line, self.stderr()))
        url = line.split()[-1]
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.csrf, self.store = None, store

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def req(self, method, path, body=None, headers=None, raw=False):
        # a guard against a server that never answers, not a time limit:
        # the export of the long run takes seconds under the
        # sanitizers, and minutes on a loaded host
        c = http.client.HTTPConnection(self.host, self.port, timeout=300)
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        if raw:
            return r.status, data, hdrs
        ctype = hdrs.get("content-type", "")
        check(ctype.startswith("application/json"),
              "%s %s answers JSON (%s)" % (method, path, ctype))
        doc = json.loads(data)
        integer_times(doc, "%s %s" % (method, path))
        return r.status, doc, hdrs

    def get(self, path, **kw):
        return self.req("GET", path, **kw)

    def post(self, path, body=None, csrf=True, headers=None):
        h = dict(headers or {})
        if csrf:
            h["X-CSRF-Token"] = self.csrf
        return self.req("POST", path, body=body, headers=h)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        check(rc == 0, "ledger-web stops with 0 on SIGTERM (got %d): %s" %
              (rc, self.stderr()))
        check(not re.search(r"Sanitizer|runtime error: ", self.stderr()),
              "ledger-web stops with no sanitizer's report: %s" %
              self.stderr())
        print(self.stderr(), end="")


def integer_times(value, where):
    """Every "..._us" member is a JSON integer (cJSON once printed a
    16-digit time as 1.7959603720989e+15, a float to every reader)."""
    if isinstance(value, dict):
        for k, v in value.items():
            check(not (k.endswith("_us") and isinstance(v, float)),
                  "%s: %s is %r, not an integer" % (where, k, v))
            integer_times(v, where)
    elif isinstance(value, list):
        for v in value:
            integer_times(v, where)


def run(*cmd, ok=(0,), env=None, cwd=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       cwd=cwd)
    check(p.returncode in ok, "%s: exit %d\n%s%s" %
          (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def fill(store, tmp, agent_env):
    run(os.path.join(EX, "order-demo"), "--store", store, "--order", "1",
        "--quiet")
    # killed by SIGKILL in the middle of a call: crashed, a call in doubt
    run(os.path.join(EX, "order-demo"), "--store", store, "--order", "2",
        "--crash-after", "7", "--quiet", ok=(-9, 137))
    for run_id in ["agent-1", "agent-2", "agent-3"]:
        run(os.path.join(EX, "agent-demo"), "--store", store, "--run",
            run_id, ok=(0, 4), env=agent_env)
    run(os.path.join(BUILD, "tests", "web_gen"), store, str(N_GEN))
    run(os.path.join(BUILD, "tests", "web_gen"), store, "--hostile")
    run(os.path.join(BUILD, "tests", "web_gen"), store, "--long",
        str(LONG_CALLS))
    run(os.path.join(BUILD, "tests", "web_gen"), store, "--big", "8")
    run(os.path.join(BUILD, "tests", "web_gen"), store, "--search")


def all_pages(s, query):
    ids, cursor, pages = [], None, 0
    while True:
        q = query + ("&cursor=" + urllib.parse.quote(cursor) if cursor else "")
        st, doc, _ = s.get("/api/runs?" + q)
        check(st == 200, "GET /api/runs?%s: %d %s" % (q, st, doc))
        ids += [r["id"] for r in doc["runs"]]
        pages += 1
        cursor = doc["next_cursor"]
        if not cursor:
            return ids, pages, doc


def search_checks(s, total):
    """A search reads each run's steps within its bounds, and the request's
    bounds stop a page before a run it could not decide: the pages hold
    every run once, whatever their bounds."""
    # "deep-marker" is in call 600 of search-deep (steps 1800-1802) and
    # call 690 of search-past (steps 2070-2072): past a run's 2,000 steps
    hits, pages, doc = all_pages(s, "q=deep-marker&limit=500")
    check(hits == ["search-deep"],
          "a search finds a word in a run's 1,800th step, not past its "
          "2,000th: %s" % hits)
    b = doc["search"]
    check(b["run_steps"] == 2000 and b["run_bytes"] == 16 << 20 and
          b["request_steps"] == 20000 and b["request_bytes"] == 64 << 20,
          "the answer says the search's bounds: %s" % b)
    # nothing matches: every run read once, in pages the bounds cut
    scanned, cut, steps, cursor = 0, 0, 0, None
    while True:
        q = "q=no-such-text-at-all&limit=500" + (
            "&cursor=" + urllib.parse.quote(cursor) if cursor else "")
        st, doc, _ = s.get("/api/runs?" + q)
        check(st == 200 and doc["runs"] == [], "q matching nothing: %s" %
              str(doc)[:300])
        b = doc["search"]
        check(b["steps"] <= 20000 + 2000 and
              b["bytes"] <= (64 << 20) + (16 << 20) + (9 << 20),
              "a request's search stays within its bounds: %s" % b)
        check(b["unreadable"] == 0, "every run's steps read: %s" % b)
        scanned += doc["scanned"]
        cut += b["runs_cut"]
        steps += b["steps"]
        cursor = doc["next_cursor"]
        check(not cursor or doc["truncated"],
              "a page of no match stops only at a bound: %s" % str(doc)[:300])
        if not cursor:
            break
    check(scanned == total, "the pages of a search read every run once: "
          "%d of %d" % (scanned, total))
    # long-run, search-deep and search-past have more steps than a run's
    # search reads, big-run more bytes (its 8 MiB string three times)
    check(cut == 4, "four runs searched up to a run's bounds: %d" % cut)
    check(steps > 3 * 2000, "the steps of every run read: %d" % steps)
    # a batch selects what the list shows
    st, doc, _ = s.post("/api/batch/delete?q=deep-marker&dry_run=1")
    check(st == 200 and [r["run_id"] for r in doc["runs"]] ==
          ["search-deep"] and doc["search"]["steps"] > 1800,
          "a batch's search finds the same run: %s" % str(doc)[:300])


def step_pages(s, run_id, limit):
    """Every step of a run, a page of limit at a time."""
    out, cursor = [], None
    while True:
        q = "limit=%d" % limit + ("&cursor=" + cursor if cursor else "")
        st, doc, _ = s.get("/api/runs/%s/steps?%s" % (run_id, q))
        check(st == 200 and len(doc["steps"]) <= limit,
              "a page of %s's steps: %d %s" % (run_id, st, str(doc)[:300]))
        out += doc["steps"]
        cursor = doc["next"]
        check(cursor is None or doc["steps"], "a page before the end holds "
              "steps")
        if cursor is None:
            return out


def steps_paged(s):
    """A run's steps a page at a time: a long run and a big payload."""
    n = 3 * LONG_CALLS + 1
    st, body, _ = s.get("/api/runs/long-run", raw=True)
    doc = json.loads(body)
    check(st == 200 and doc["run"]["steps"] == n and
          len(doc["steps"]) == 200 and doc["next"] == "0:133" and
          len(body) < 200 * 1024, "a run of %d steps opens with its first "
          "page (%d bytes): %s" % (n, len(body), doc["next"]))
    check(doc["run"]["in_doubt"] is False and
          doc["run"]["steps_scanned"] == n, "and its marks, read whole")
    # paged through, the steps are the export's, in its order
    st, body, _ = s.get("/api/runs/long-run/export", raw=True)
    lines = [json.loads(x) for x in body.decode().splitlines()][1:]
    check(len(lines) == n, "the export has every step: %d" % len(lines))
    paged = step_pages(s, "long-run", 1000)
    check([x["id"] for x in paged] == [x["id"] for x in lines] and
          all(p["payload"] == e["payload"] and p["hash"] == e["hash"]
              for p, e in zip(paged, lines)),
          "paged by 1000, the %d steps are the export's, in order" % n)
    # a cursor is a step the run has: the page starts there; one it has
    # not (past a callee's last step, or past the end) is refused, not a
    # page that starts elsewhere or holds nothing
    for cur, first in [("0:6", "0:6"), ("0.4:0", "0.4:0"),
                       ("0.5:7", None), ("0:%d" % (2 * LONG_CALLS + 1), None)]:
        st, doc, _ = s.get("/api/runs/long-run/steps?limit=2&cursor=" + cur)
        got = doc["steps"][0]["id"] if st == 200 else doc.get("error")
        check(st == 200 and got == first if first else
              st == 400 and got == "bad_cursor",
              "from cursor %s: %s (%d %s)" % (cur, first, st, got))
    for bad, code in [("cursor=x:1", 400), ("cursor=0:1:2", 400),
                      ("cursor=1:0", 400), ("limit=0", 400),
                      ("limit=1001", 400), ("limit=x", 400)]:
        st, doc, _ = s.get("/api/runs/long-run/steps?" + bad)
        check(st == code and doc["error"] and doc["message"],
              "steps?%s: %d (%d %s)" % (bad, code, st, doc))
    st, doc, _ = s.get("/api/runs/no-such-run/steps")
    check(st == 404, "the steps of no run: 404")
    # an 8 MiB payload: cut in the page, whole on demand
    st, body, _ = s.get("/api/runs/big-run", raw=True)
    doc = json.loads(body)
    cut = [x for x in doc["steps"] if x.get("payload_truncated")]
    check(st == 200 and len(cut) == 3 and len(body) < 256 * 1024 and
          all(x["payload"] is None and x["payload_bytes"] > 8 << 20 and
              0 < len(x["payload_preview"]) <= 2048 for x in cut),
          "a page cuts the three 8 MiB payloads (%d bytes): %s" %
          (len(body), [(x["id"], x.get("payload_bytes")) for x in cut]))
    whole = {}
    for x in cut:
        st, one, _ = s.get("/api/runs/big-run/step?id=" + x["id"])
        check(st == 200 and one["step"]["id"] == x["id"] and
              x["payload_preview"] == json.dumps(
                  one["step"]["payload"], separators=(",", ":"),
                  ensure_ascii=False)[:len(x["payload_preview"])],
              "step %s comes whole, the page's preview its start" % x["id"])
        whole[x["id"]] = one["step"]["payload"]
    echo = [p["payload"]["echo"] if "payload" in p else p["echo"]
            for p in whole.values()]
    check(all(len(e) == 8 << 20 for e in echo), "8 MiB whole, each")
    st, doc, _ = s.get("/api/runs/big-run/step?id=0:999")
    check(st == 404 and doc["error"] == "not_found", "no such step: 404")
    for bad in ["", "?id=", "?id=0", "?id=" + urllib.parse.quote("<x>")]:
        st, doc, _ = s.get("/api/runs/big-run/step" + bad)
        check(st == 400, "a bad step id %r: 400 (%d)" % (bad, st))
    # marks are the same a step at a time (the call's answer looked up
    # past the page) as in one page
    for run_id in ["order-2", "agent-1"]:
        st, doc, _ = s.get("/api/runs/%s/steps?limit=1000" % run_id)
        one = [(x["id"], x.get("mark")) for x in step_pages(s, run_id, 1)]
        check(one == [(x["id"], x.get("mark")) for x in doc["steps"]] and
              any(m in ("in_doubt", "waiting") for _, m in one),
              "%s's marks a step at a time: %s" % (run_id, one))


def main():
    tmp = tempfile.mkdtemp(prefix="pl-web-")
    try:
        test(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("web_test: ok (%s)" % ("postgresql" if PG else "lmdb"))


def test(tmp):
    store = PG if PG else os.path.join(tmp, "store.mdb")
    agent = os.path.join(tmp, "agent")
    shutil.copytree(os.path.join(EX, "agent", "data"),
                    os.path.join(agent, "data"))
    shutil.copy(os.path.join(EX, "agent", "script.json"), agent)
    env = dict(os.environ, AGENT_MODEL="scripted://" +
               os.path.join(agent, "script.json"),
               AGENT_DATA=os.path.join(agent, "data"))
    env.pop("PL_WEB_TOKEN", None)
    fill(store, tmp, env)
    total = N_GEN + 5 + len(HOSTILE) + 1 + 3 + 2 + 2
    plugins = ["--plugin", os.path.join(EX, "order-plugin.so"),
               "--plugin", os.path.join(EX, "agent-plugin.so")]

    # --- refusals before serving ---
    p = subprocess.run([WEB, store, "--listen", "0.0.0.0:0"], env=env,
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and "without a token" in p.stderr,
          "a non-loopback address without a token is refused: %d %s" %
          (p.returncode, p.stderr))
    # design.md §19: a token of at least 16 bytes (16 is taken below)
    p = subprocess.run([WEB, store, "--listen", "127.0.0.1:0"],
                       env=dict(env, PL_WEB_TOKEN="x" * 15),
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and "too short" in p.stderr,
          "a token of 15 bytes is refused: %d %s" % (p.returncode, p.stderr))
    p = subprocess.run([WEB, store, "--bogus"], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 1 and "unknown option" in p.stderr,
          "an unknown flag is refused")
    p = subprocess.run([WEB, "--help"], capture_output=True, text=True)
    check(p.returncode == 0 and "--read-only" in p.stdout, "--help")
    with open("/dev/full", "w") as full:
        p = subprocess.run([WEB, "--help"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=30)
    check(p.returncode == 2 and "cannot write the output" in p.stderr,
          "--help lost to a full disk: %d %s" % (p.returncode, p.stderr))
    p = subprocess.run([WEB, os.path.join(tmp, "nothing-here")],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 2, "a missing store exits 2: %d" % p.returncode)

    # exports are written in TMPDIR; a stream or download whose client
    # takes nothing is cut after 2 s (web_attack.py)
    exports = os.path.join(tmp, "exports")
    os.mkdir(exports)
    s = Server(store, *plugins, "--stall-timeout", "2",
               env=dict(env, TMPDIR=exports))
    s.tmpdir = exports
    held = None
    try:
        api(s, total)
        web_attack.attacks(s, check)
        held = web_attack.held_export(s, check)
    finally:
        s.stop()  # with a download under way: exit 0, nothing leaked
        if held:
            held.close()
    check(os.listdir(exports) == [], "no export file is left: %s" %
          os.listdir(exports))
    for bad in ["127.0.0.1:+80", "127.0.0.1: 80", "127.0.0.1:-0"]:
        p = subprocess.run([WEB, store, "--listen", bad],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 1 and "expected HOST:PORT" in p.stderr,
              "--listen %r: refused (%d %s)" % (bad, p.returncode, p.stderr))
    for bad in ["0", "x", "3601"]:
        p = subprocess.run([WEB, store, "--stall-timeout", bad],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 1 and "--stall-timeout" in p.stderr,
              "--stall-timeout %r: refused (%d %s)" %
              (bad, p.returncode, p.stderr))

    # --- read-only ---
    ro = Server(store, "--read-only", env=env)
    try:
        st, doc, _ = ro.get("/api/session")
        check(st == 200 and doc["read_only"] is True and
              doc["actions"] == ["verify"], "read-only session: %s" % doc)
        ro.csrf = doc["csrf"]
        # verify reads: a run's page offers it whatever the mode
        st, doc, _ = ro.post("/api/runs/order-1/verify")
        check(st == 200 and doc["verify"] == "ok",
              "read-only verifies: %d %s" % (st, doc))
        st, doc, _ = ro.post("/api/runs/order-1/verify", csrf=False)
        check(st == 403 and doc["error"] == "csrf",
              "read-only verify wants the CSRF token: %d %s" % (st, doc))
        st, doc, _ = ro.post("/api/runs/order-1/continue")
        check(st == 403 and doc["error"] == "read_only",
              "read-only refuses actions: %d %s" % (st, doc))
        st, doc, _ = ro.get("/api/runs?limit=5")
        check(st == 200 and len(doc["runs"]) == 5, "read-only lists")
        # an address in use: exit 2, one line that says why
        p = subprocess.run([WEB, store, "--read-only", "--listen",
                            "127.0.0.1:%d" % ro.port], env=env,
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and p.stdout == "" and
              p.stderr.count("\n") == 1 and
              p.stderr.startswith("ledger-web: cannot serve on ") and
              "in use" in p.stderr,
              "an address in use: %d %r" % (p.returncode, p.stderr))
    finally:
        ro.stop()

    # --- a check against changed code: the first divergence ---
    v2 = Server(store, "--plugin", os.path.join(EX, "order-plugin-v2.so"),
                env=env)
    try:
        st, doc, _ = v2.get("/api/session")
        v2.csrf = doc["csrf"]
        st, doc, _ = v2.post("/api/runs/order-1/check")
        check(st == 200 and doc["check"] == "diverged" and
              doc["divergence"]["step"] and
              doc["divergence"]["recorded"]["payload"] !=
              doc["divergence"]["now"]["payload"],
              "check against changed code diverges: %s" % doc)
        st, doc, _ = v2.post("/api/runs/order-1/upgrade",
                             body={"at": doc["divergence"]["step"]})
        check(st == 409, "a completed run is not upgraded: %d" % st)
        # a crashed run (after ship's result) the new code cannot replay:
        # upgraded where it diverges, finished by the new code
        run(os.path.join(EX, "order-demo"), "--store", store, "--order", "3",
            "--crash-after", "13", "--quiet", ok=(-9, 137))
        st, doc, _ = v2.post("/api/runs/order-3/check")
        check(st == 200 and doc["check"] == "diverged",
              "the crashed order-3 diverges under the new code: %s" % doc)
        at = doc["divergence"]["step"]
        st, doc, _ = v2.post("/api/runs/order-3/upgrade", body={"at": "x"})
        check(st == 400, "an upgrade at a bad step: 400 (%d %s)" % (st, doc))
        st, doc, _ = v2.post("/api/runs/order-3/upgrade",
                             body={"at": at, "new_id": "order-3-v2"})
        check(st == 200 and doc["status"] == "completed" and
              doc["new_run"] == "order-3-v2" and
              doc["superseded"] == "order-3", "upgrade: %s" % doc)
        st, doc, _ = v2.get("/api/runs/order-3")
        check(doc["run"]["status"] == "superseded" and
              doc["run"]["successor"] == "order-3-v2",
              "the old run is superseded by the new: %s" % doc["run"])
        st, doc, _ = v2.post("/api/runs/order-3/upgrade", body={"at": at})
        check(st == 409, "a superseded run is not upgraded again: %d" % st)
    finally:
        v2.stop()

    # --- a token ---
    token = "t0ken-" + "x" * 10  # 16 bytes, the least taken
    tf = os.path.join(tmp, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    t = Server(store, "--read-only", "--token-file", tf, env=env)
    try:
        st, doc, _ = t.get("/api/session")
        check(st == 401, "no token: 401 (%d)" % st)
        st, doc, _ = t.get("/api/session",
                           headers={"Authorization": "Bearer " + token})
        check(st == 200, "a bearer token is taken")
        st, doc, _ = t.get("/api/session",
                           headers={"Authorization": "Bearer wrong" + token})
        check(st == 401, "a wrong bearer token is refused")
        st, body, h = t.get("/login?token=" + token, raw=True)
        cookie = h.get("set-cookie", "")
        check(st == 303 and "HttpOnly" in cookie and
              "SameSite=Strict" in cookie and h.get("location") == "/",
              "login sets the cookie and redirects: %d %s" % (st, cookie))
        st, doc, _ = t.get("/api/session", headers={
            "Cookie": cookie.split(";")[0]})
        check(st == 200, "the cookie is taken")
        st, doc, _ = t.get("/login?token=nope")
        check(st == 403, "a wrong login is refused")
        # the token given twice is read as sent: not the first of them
        for q in ("token=%s&token=nope" % token, "token=%s&TOKEN=" % token):
            st, doc, h = t.get("/login?" + q)
            check(st == 400 and doc["error"] == "duplicate_parameter" and
                  "set-cookie" not in h,
                  "a login with the token given twice is refused: %d %s" %
                  (st, doc))
    finally:
        t.stop()


def api(s, total):
    st, doc, h = s.get("/api/session")
    check(st == 200 and doc["read_only"] is False and len(doc["csrf"]) == 64,
          "session: %s" % doc)
    check("no-store" in h.get("cache-control", ""), "API answers not cached")
    s.csrf = doc["csrf"]

    # --- the page's files ---
    st, body, h = s.get("/", raw=True)
    check(st == 200 and h["content-type"].startswith("text/html"), "index")
    csp = h.get("content-security-policy", "")
    check("script-src 'self'" in csp and "unsafe-inline" not in csp,
          "a strict CSP: %s" % csp)
    check(h.get("x-content-type-options") == "nosniff", "nosniff")
    st, body, h = s.get("/app.js", raw=True)
    check(st == 200 and "javascript" in h["content-type"], "app.js")
    st, _, _ = s.get("/app.js", raw=True, headers={"If-None-Match":
                                                   h["etag"]})
    check(st == 304, "an unchanged file is not sent again")
    st, body, h = s.get("/style.css", raw=True)
    check(st == 200 and h["content-type"].startswith("text/css"), "css")
    st, doc, _ = s.get("/no-such-file.js")
    check(st == 404, "a missing file: 404")

    # --- the list: every run once, newest first, by cursor ---
    deadline = time.time() + 60
    while True:
        st, doc, _ = s.get("/api/runs?limit=1")
        if doc["counts_complete"] or time.time() > deadline:
            break
        time.sleep(0.2)
    check(doc["counts_total"] == total, "counts_total %d, want %d" %
          (doc["counts_total"], total))
    c = doc["counts"]
    check(c["crashed"] == 1 and c["suspended"] == 3 and
          c["failed"] == N_GEN // 10 + 2, "counts: %s" % c)
    ids, pages, _ = all_pages(s, "limit=%d" % PAGE)
    check(len(ids) == total and len(set(ids)) == total,
          "every run listed once: %d of %d" % (len(set(ids)), total))
    check(ids == sorted(ids, reverse=True), "newest first (id order)")
    check(pages == (total + PAGE - 1) // PAGE, "pages: %d" % pages)
    asc, _, _ = all_pages(s, "limit=%d&order=asc" % PAGE)
    check(asc == list(reversed(ids)), "ascending is the same, reversed")

    # filters
    st, doc, _ = s.get("/api/runs?status=done")
    check(st == 400 and all(w in doc["message"] for w in (
        "running", "crashed", "suspended", "completed", "failed", "submitted",
        "waiting", "cancelled", "superseded", "continued")),
        "bad_status names every status: %s" % doc)
    crashed, _, _ = all_pages(s, "status=crashed")
    check(crashed == ["order-2"], "status=crashed: %s" % crashed)
    failed, _, _ = all_pages(s, "status=failed&limit=500")
    check(len(failed) == N_GEN // 10 + 2, "status=failed: %d" % len(failed))
    orders, _, _ = all_pages(s, "policy=order")
    check(sorted(orders) == ["order-1", "order-2"], "policy: %s" % orders)
    pre, _, _ = all_pages(s, "prefix=hostile-")
    check(sorted(pre) == ["hostile-%d" % i for i in range(5)] +
          ["hostile-big"], "prefix: %s" % pre)
    pre, _, _ = all_pages(s, "prefix=hostile-&order=asc")
    check(len(pre) == 6, "prefix ascending: %s" % pre)
    hits, _, _ = all_pages(s, "q=" + urllib.parse.quote("onerror=alert"))
    check("hostile-1" in hits and "hostile-3" in hits, "q: %s" % hits)
    search_checks(s, total)
    st, doc, _ = s.get("/api/runs?since=1h&until=2999-01-01&limit=3")
    check(st == 200 and len(doc["runs"]) == 3, "since/until")
    st, doc, _ = s.get("/api/runs?since=2999-01-01")
    check(st == 200 and doc["runs"] == [], "since in the future: none")
    for bad in ["status=bogus", "limit=0", "limit=100000", "since=yesterday",
                "order=sideways", "cursor=" + urllib.parse.quote("<x>")]:
        st, doc, _ = s.get("/api/runs?" + bad)
        check(st == 400 and doc["error"] and doc["message"],
              "bad %s: 400 (%d)" % (bad, st))

    # --- hostile strings come back as the same data, escaped ---
    for i, text in enumerate(HOSTILE):
        st, body, h = s.get("/api/runs/hostile-%d" % i, raw=True)
        check(st == 200, "hostile run %d" % i)
        check(b"<script" not in body and b"<img" not in body,
              "no raw markup in the JSON of hostile-%d" % i)
        doc = json.loads(body)
        check(doc["run"]["payload"]["echo"] == text,
              "hostile-%d round-trips" % i)
    st, doc, _ = s.get("/api/runs/hostile-big")
    check(len(doc["run"]["payload"]["echo"]) == 1 << 20, "1 MB payload")
    st, doc, _ = s.get("/api/runs?prefix=hostile-big")
    check(len(doc["runs"][0]["payload_preview"]) <= 200,
          "the list previews a payload only")

    steps_paged(s)

    # --- one run ---
    st, doc, _ = s.get("/api/runs/order-2")
    check(st == 200 and doc["run"]["crashed"] and doc["run"]["in_doubt"],
          "order-2 is crashed with a call in doubt: %s" % doc["run"])
    marks = [x.get("mark") for x in doc["steps"]]
    check("in_doubt" in marks, "a step marked in_doubt")
    check(doc["next"] is None and doc["run"]["in_doubt_calls"] ==
          marks.count("in_doubt"), "a short run comes in one page")
    st, doc, _ = s.get("/api/runs/agent-1")
    check(doc["run"]["status"] == "suspended" and doc["run"]["tokens"]
          ["model_calls"] > 0, "agent-1: suspended, with tokens")
    st, doc, _ = s.get("/api/runs/agent-1/timeline")
    check(st == 200 and doc["calls"] and
          any("tokens_in" in x for x in doc["calls"]),
          "the timeline shows model calls' tokens")
    # each call paired with its own result, also where the model asked for
    # two tools at once (two calls, then their two results)
    st, run_doc, _ = s.get("/api/runs/agent-1")
    steps = {x["id"]: x for x in run_doc["steps"]}
    calls = [x for x in run_doc["steps"] if x["type"] == "action_call"]
    seqs = {(x["path"], x["seq"]) for x in calls}
    check(any((p, q + 1) in seqs for p, q in seqs),
          "agent-1 makes two calls back to back")
    check(len(doc["calls"]) == len(calls), "every call on the timeline")
    results = [x["result"] for x in doc["calls"] if x.get("result")]
    check(len(results) == len(set(results)), "no result answers two calls")
    for x in doc["calls"]:
        if x["policy"] == "ask_human":
            check(x["end_us"] is None, "the suspended call has no end")
            continue
        r = steps.get(x["result"])
        check(r and r["type"] == "action_result" and
              r["path"] == x["path"] and r["actor"] == x["policy"] and
              x["duration_ms"] >= 0,
              "call %s (%s) ends at its own result: %s" %
              (x["id"], x["policy"], r and (r["id"], r["type"], r["actor"])))
        check(("tokens_in" in x) == ("tokens_in" in r["payload"]),
              "call %s has tokens only from its result" % x["id"])
    st, body, h = s.get("/api/runs/order-1/export", raw=True)
    lines = [json.loads(x) for x in body.decode().splitlines()]
    check(st == 200 and lines[0]["kind"] == "run" and len(lines) > 1,
          "export")
    st, doc, _ = s.get("/api/runs/no-such-run")
    check(st == 404, "no such run: 404")
    st, doc, _ = s.get("/api/runs/bad%20id")
    check(st == 400, "a bad run id: 400 (%d)" % st)
    st, doc, _ = s.get("/api/nothing")
    check(st == 404, "an unknown path: 404")
    st, doc, _ = s.req("PUT", "/api/runs")
    check(st == 405, "PUT: 405")
    st, doc, _ = s.get("/api/session", headers={"Host": "evil.example"})
    check(st == 403 and doc["error"] == "host", "a foreign Host: 403")

    st, doc, _ = s.get("/api/inbox")
    check([r["id"] for r in doc["runs"]] == ["agent-1", "agent-2", "agent-3"]
          and "ask" in doc["runs"][0]["prompt"], "the inbox, oldest first: %s"
          % doc["runs"])
    st, doc, _ = s.get("/api/overview")
    check(st == 200 and len(doc["buckets"]) == 60 and doc["latency"] and
          doc["waiting"][0]["id"] == "agent-1", "overview")
    # the sample is bounded (the long run read only so far), and gives
    # every policy's latencies, p50 no more than p95
    lat = {e["policy"]: e for e in doc["latency"]}
    check(0 < doc["sampled_steps"] <= 20000 and 0 < doc["sampled"] <= 200
          and "noop" in lat and
          all(0 <= e["p50_ms"] <= e["p95_ms"] and e["calls"] > 0
              for e in lat.values()),
          "the overview's sample: %d steps of %d runs, %s" %
          (doc["sampled_steps"], doc["sampled"], sorted(lat)))
    # every run was made in the hour: its buckets add up to the counts,
    # and the tokens per model to the model runs' own (the agents')
    sums = {k: sum(b[k] for b in doc["buckets"]) for k in (
        "completed", "failed", "suspended", "crashed", "cancelled", "waiting")}
    check(all(sums[k] == doc["counts"][k] for k in sums),
          "the overview's runs by status: %s, counts %s" %
          (sums, doc["counts"]))
    want = [0, 0]
    for i in (1, 2, 3):
        t = s.get("/api/runs/agent-%d" % i)[1]["run"]["tokens"]
        want = [want[0] + t["input"], want[1] + t["output"]]
    got = [sum(sum(m[k]) for m in doc["tokens"]) for k in ("input", "output")]
    check(want[0] > 0 and got == want and
          [m["model"] for m in doc["tokens"]] == ["researcher"],
          "the overview's tokens per model: %s, the runs' %s" %
          (doc["tokens"], want))
    st, doc, _ = s.get("/api/overview?window=day")
    check(st == 200 and len(doc["buckets"]) == 96, "overview by day")
    st, doc, _ = s.get("/api/overview?window=year")
    check(st == 400, "a bad window: 400")

    # --- refusals of POST ---
    st, doc, _ = s.post("/api/runs/order-2/continue", csrf=False)
    check(st == 403 and doc["error"] == "csrf", "no CSRF token: 403")
    st, doc, _ = s.post("/api/runs/order-2/continue",
                        headers={"X-CSRF-Token": "0" * 64}, csrf=False)
    check(st == 403, "a wrong CSRF token: 403")
    st, doc, _ = s.post("/api/runs/agent-1/answer", body="{not json")
    check(st == 400 and doc["error"] == "bad_json", "bad JSON: 400")
    st, doc, _ = s.post("/api/runs/agent-1/answer", body="[1]")
    check(st == 400, "an answer that is no object: 400")
    st, doc, _ = s.post("/api/runs/agent-1/answer",
                        body="x" * (2 << 20))
    check(st == 413, "a huge body: 413 (%d)" % st)
    st, doc, _ = s.post("/api/runs/order-1/answer", body={"a": 1})
    check(st == 409, "answering a run not suspended: 409")
    st, doc, _ = s.post("/api/runs/order-1/explode")
    check(st == 404, "an unknown action: 404")
    st, doc, _ = s.post("/api/batch/cancel")
    check(st == 400 and doc["error"] == "no_filter",
          "a batch cancel without a filter: 400")
    st, doc, _ = s.post("/api/runs/agent-2/signal", body={"payload": {}})
    check(st == 400, "a signal without a name: 400")
    st, doc, _ = s.post("/api/runs/order-1/signal", body={"name": "poke"})
    check(st == 409, "signalling a completed run: 409 (%d %s)" % (st, doc))
    st, doc, _ = s.post("/api/runs/order-1/cancel")
    check(st == 409, "cancelling a completed run: 409 (%d %s)" % (st, doc))
    st, doc, _ = s.post("/api/runs/agent-1/delete")
    check(st == 409 and doc["error"] == "PL_ESTATE",
          "deleting a suspended run: 409 (%d %s)" % (st, doc))
    st, doc, _ = s.get("/api/runs/agent-1")
    check(st == 200, "a refused delete leaves the run")
    st, doc, _ = s.post("/api/batch/delete")
    check(st == 400 and doc["error"] == "no_filter",
          "a batch delete without a filter: 400")
    st, doc, _ = s.post("/api/batch/delete?prefix=agent-&dry_run=yes")
    check(st == 400 and doc["error"] == "bad_dry_run", "a bad dry_run: 400")
    st, doc, _ = s.post("/api/batch/delete?prefix=agent-")
    check(st == 200 and doc["deleted"] == 0 and doc["runs"] == [],
          "a batch delete never takes a suspended run: %s" % doc)
    # a prefix's batch reads its runs and stops there: the store's N_GEN
    # runs, their UUIDv7 ids sorting below "agent-", are not read through
    st, listed, _ = s.get("/api/runs?prefix=agent-&limit=100")
    agents = len(listed["runs"])
    for order in ("", "&order=asc"):
        st, doc, _ = s.post("/api/batch/cancel?prefix=agent-&dry_run=1" +
                            order)
        check(st == 200 and agents > 0 and doc["scanned"] == agents and
              not doc["truncated"] and
              all(r["run_id"].startswith("agent-") for r in doc["runs"]),
              "a batch on a prefix read %s run records for its %d runs%s"
              % (doc.get("scanned"), agents, order))

    # --- live: an event stream, then the actions ---
    ev = http.client.HTTPConnection(s.host, s.port, timeout=30)
    ev.request("GET", "/api/events")
    er = ev.getresponse()
    check(er.status == 200 and
          er.getheader("Content-Type") == "text/event-stream", "events")
    check(er.readline().startswith(b"retry:"), "the stream starts")

    st, doc, _ = s.post("/api/runs/order-2/continue")
    check(st == 200 and doc["status"] == "completed" and
          doc["calls_served"] >= 1, "continue the crashed run: %s" % doc)
    seen, got = False, []
    deadline = time.time() + 20
    while not seen and time.time() < deadline:
        line = er.readline()
        got.append(line)
        if line.startswith(b"data:") and b'"order-2"' in line and \
                b'"completed"' in line:
            seen = True
    check(seen, "the stream announces order-2 completed: %s" % got)
    ev.close()

    st, doc, _ = s.post("/api/runs/agent-1/answer",
                        body={"approved": True})
    check(st == 200 and doc["status"] == "completed" and
          doc["note"] == "(resumed)", "answer the suspended run: %s" % doc)
    st, doc, _ = s.post("/api/runs/agent-2/signal",
                        body={"name": "poke", "payload": {"n": 1}})
    check(st == 200 and doc["status"] == "delivered",
          "a signal delivered to a suspended run: %s" % doc)
    st, doc, _ = s.post("/api/runs/agent-2/cancel",
                        body={"reason": "<b>not needed</b>"})
    check(st == 200 and doc["now"] == "cancelled",
          "cancel a suspended run: %s" % doc)
    st, doc, _ = s.get("/api/runs/agent-2")
    check(doc["run"]["status"] == "cancelled" and
          doc["run"]["reason"] == "<b>not needed</b>", "recorded cancelled")
    # a reason over 4096 bytes, which pl_run_cancel() refuses, is refused
    # before any run is picked (the cancel below still finds agent-3)
    st, doc, _ = s.post("/api/batch/cancel?prefix=agent-&reason=" +
                        "r" * 5000)
    check(st == 400 and doc["error"] == "bad_reason",
          "a batch cancel's reason too long: %d %s" % (st, str(doc)[:400]))
    st, doc, _ = s.post("/api/batch/cancel?prefix=agent-&reason=batch")
    check(st == 200 and doc["cancelled"] == 1 and
          doc["runs"][0]["run_id"] == "agent-3", "batch cancel: %s" % doc)
    st, doc, _ = s.get("/api/runs?status=cancelled")
    check(sorted(r["id"] for r in doc["runs"]) == ["agent-2", "agent-3"],
          "status=cancelled lists them")
    st, doc, _ = s.get("/api/inbox")
    check(doc["runs"] == [], "the inbox is empty")
    st, doc, _ = s.get("/api/overview")
    check(st == 200 and doc["waiting"] == [],
          "the overview lists no answered or cancelled run as waiting: %s"
          % doc["waiting"])
    st, doc, _ = s.post("/api/runs/order-1/check")
    check(st == 200 and doc["check"] == "ok", "check: %s" % doc)
    st, doc, _ = s.post("/api/runs/order-1/verify")
    check(st == 200 and doc["verify"] == "ok", "verify: %s" % doc)
    st, doc, _ = s.post("/api/runs/order-1/fork",
                        body={"at": "0:2", "new_id": "order-1-fork"})
    check(st == 200 and doc["status"] == "completed" and
          doc["forked_from"] == "order-1", "fork: %s" % doc)
    st, doc, _ = s.post("/api/runs/order-1/fork", body={"at": "9:9"})
    check(st == 400, "a bad fork point: 400 (%d %s)" % (st, doc))
    st, doc, _ = s.post("/api/batch/continue?status=crashed")
    check(st == 200 and doc["continued"] == 0, "batch continue: %s" % doc)
    # crashed runs continued by a batch, and one by ledger-replay --run:
    # each records the same steps (by type, actor and payload's names)
    for o in ("b1", "b2", "b3"):
        run(os.path.join(EX, "order-demo"), "--store", s.store, "--order", o,
            "--crash-after", "8", "--quiet", ok=(-9, 137))
    st, doc, _ = s.post("/api/batch/continue?prefix=order-b&limit=2")
    check(st == 200 and doc["continued"] == 2 and doc["truncated"] and
          [(r["run_id"], r["status"]) for r in doc["runs"]] ==
          [("order-b3", "completed"), ("order-b2", "completed")],
          "a batch continues the crashed runs, newest first: %s" % doc)
    run(os.path.join(BUILD, "tools", "ledger-replay"), s.store, "--plugin",
        os.path.join(EX, "order-plugin.so"), "--run", "order-b1")

    def shape(run_id):
        return [(x["path"], x["seq"], x["type"], x["actor"],
                 sorted(x["payload"] or {})) for x in step_pages(s, run_id, 50)]
    check(shape("order-b3") == shape("order-b1") == shape("order-b2") and
          len(shape("order-b1")) == 10,
          "the batch records what ledger-replay records: %s" %
          shape("order-b1"))
    st, doc, _ = s.get("/api/runs/order-1-fork")
    check(st == 200 and doc["run"]["status"] == "completed",
          "the fork is recorded")
    st, doc, _ = s.post("/api/runs/order-1-fork/delete")
    check(st == 200 and doc == {"run_id": "order-1-fork", "deleted": True},
          "delete a completed run: %s" % doc)
    st, doc, _ = s.get("/api/runs/order-1-fork")
    t = doc.get("tombstone") or {}
    check(st == 404 and doc["error"] == "deleted" and
          t.get("status") == "completed" and
          t.get("root_policy") == "order" and len(t.get("head") or "") == 64
          and t["deleted_us"] >= t["created_us"] > 0 and
          t["expires_us"] > t["deleted_us"],
          "a deleted run is gone, its tombstone shown: %d %s" % (st, doc))
    st, doc, _ = s.get("/api/runs/order-1-fork/steps")
    check(st == 404 and doc["error"] == "deleted", "its steps too: %s" % doc)
    st, doc, _ = s.get("/api/runs/never-was")
    check(st == 404 and doc["error"] == "not_found" and
          "tombstone" not in doc, "a run that never was: not_found")
    st, doc, _ = s.post("/api/runs/order-1-fork/delete")
    check(st == 404, "deleting it again: 404 (%d %s)" % (st, doc))

    # --- a batch delete: the ended runs a filter holds ---
    st, doc, _ = s.post("/api/batch/delete?prefix=agent-&dry_run=1")
    check(st == 200 and doc["dry_run"] is True and doc["matched"] == 3 and
          sorted(r["run_id"] for r in doc["runs"]) ==
          ["agent-1", "agent-2", "agent-3"] and
          {r["state"] for r in doc["runs"]} == {"completed", "cancelled"},
          "a dry run names the ended runs it would delete: %s" % doc)
    st, doc, _ = s.get("/api/runs/agent-1")
    check(st == 200, "a dry run deletes nothing")
    st, doc, _ = s.post("/api/batch/delete?prefix=agent-&limit=2")
    check(st == 200 and doc["deleted"] == 2 and doc["truncated"] is True and
          all(r["deleted"] for r in doc["runs"]),
          "a batch delete takes at most its limit, and says more match: %s"
          % doc)
    st, doc, _ = s.post("/api/batch/delete?prefix=agent-")
    check(st == 200 and doc["deleted"] == 1 and doc["refused"] == 0 and
          doc["truncated"] is False, "and again, the rest: %s" % doc)
    st, doc, _ = s.get("/api/runs?prefix=agent-")
    check(st == 200 and doc["runs"] == [], "the agent runs are gone")
    st, doc, _ = s.get("/api/runs/agent-2")
    check(st == 404 and doc["tombstone"]["status"] == "cancelled",
          "each keeps its tombstone: %s" % doc)


if __name__ == "__main__":
    main()
