#!/usr/bin/env python3
"""ledger-web's promises in docs/tools.md that web_test.py does not reach,
against the real server on loopback.

    web_promises.py BUILD_DIR

Each case makes its own LMDB store in a temporary directory, starts the
real ledger-web on it, and checks one promise of "## ledger-web" (its
Safety part and the JSON API).  Exits non-zero at the first failure.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import web_test
from web_test import Server, check, run

BUILD = web_test.BUILD
WEB = web_test.WEB
GEN = os.path.join(BUILD, "tests", "web_gen")


def env_without_token():
    env = dict(os.environ)
    env.pop("PL_WEB_TOKEN", None)
    return env


def events(s):
    """An open event stream of @s: (connection, response), past its
    hello."""
    c = http.client.HTTPConnection(s.host, s.port, timeout=60)
    c.request("GET", "/api/events")
    r = c.getresponse()
    check(r.status == 200, "the event stream opens: %d" % r.status)
    while r.readline().strip() != b"event: hello":
        pass
    return c, r


def next_event(r, want, deadline, what):
    """The data of the first event of @r for which want(type, data) holds,
    waiting until @deadline (a guard against a stream that never says it,
    not a time the server must keep)."""
    kind = None
    while time.time() < deadline:
        line = r.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            if want(kind, data):
                return data
    check(False, "the event stream says %s" % what)


def refused(args, env, what):
    """ledger-web @args must exit 1 before it serves, saying why: its
    stderr.  One that serves instead is stopped, and fails the case."""
    err = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([WEB, *args], env=env, stdout=subprocess.PIPE,
                         stderr=err, text=True)
    out = p.stdout.readline()  # its URL once it serves; "" when it exits
    if out:
        p.terminate()
    p.wait(timeout=60)
    err.seek(0)
    check(p.returncode == 1 and out == "",
          "%s: exit 1 before serving (%s, %r)" % (what, p.returncode, out))
    err = err.read()
    return err


def test_token_bounds(tmp):
    """A token is 16..512 bytes: one longer is refused at start, so the
    login's cookie always holds the whole token and its HttpOnly and
    SameSite=Strict (a 630-byte token lost both, cut to fit the header)."""
    store = os.path.join(tmp, "store.mdb")
    run(GEN, store, "3")
    tf = os.path.join(tmp, "token")
    for n in (513, 630, 4000):
        with open(tf, "w") as f:
            f.write("t" * n + "\n")
        err = refused([store, "--listen", "127.0.0.1:0", "--token-file",
                       tf], env_without_token(), "a %d-byte token file" % n)
        check("too long" in err, "it says the token is too long: %r" % err)
        env = dict(env_without_token(), PL_WEB_TOKEN="t" * n)
        err = refused([store, "--listen", "127.0.0.1:0"], env,
                      "a %d-byte PL_WEB_TOKEN" % n)
        check("too long" in err, "it says the token is too long: %r" % err)
    token = "T" * 512
    with open(tf, "w") as f:
        f.write(token + "\n")
    s = Server(store, "--read-only", "--token-file", tf,
               env=env_without_token())
    try:
        st, _, h = s.get("/login?token=" + token, raw=True)
        cookie = h.get("set-cookie", "")
        check(st == 303 and cookie.startswith("pl_web=%s;" % token) and
              "HttpOnly" in cookie and
              cookie.rstrip().endswith("SameSite=Strict"),
              "a 512-byte token's cookie is whole: %d %r" % (st, cookie))
        st, doc, _ = s.get("/api/session",
                           headers={"Cookie": cookie.split(";")[0]})
        check(st == 200 and doc["token_required"] is True,
              "the cookie of a 512-byte token is taken: %d" % st)
    finally:
        s.stop()


def test_newest_runs_watched(tmp):
    """The poller watches the newest 1,000 unfinished runs: a run made
    while the server serves, over 1,000 older unfinished runs, is watched,
    and its end announced as a "run" event of change "status" (it was
    not: the watched set, full of the older runs, took no new one)."""
    store = os.path.join(tmp, "store.mdb")
    run(GEN, store, "--queued", "1000")
    s = Server(store, env=env_without_token())
    try:
        st, doc, _ = s.get("/api/session")
        s.csrf = doc["csrf"]
        deadline = time.time() + 120
        while time.time() < deadline:  # the counts watch the 1,000 first
            st, doc, _ = s.get("/api/runs?limit=1")
            if doc["counts_complete"]:
                break
            time.sleep(0.2)
        check(doc["counts"]["submitted"] == 1000,
              "1,000 runs queued: %s" % doc["counts"])
        c, r = events(s)
        run(GEN, store, "--queued", "1")
        new = next_event(r, lambda k, d: k == "run" and d["change"] == "new",
                         time.time() + 60, "the new run")["id"]
        st, doc, _ = s.get("/api/runs?limit=1")
        check(doc["runs"][0]["id"] == new, "%s is the newest run" % new)
        st, doc, _ = s.post("/api/runs/%s/cancel" % new)
        check(st == 200 and doc["now"] == "cancelled" and doc["ended"],
              "the new run is cancelled: %d %s" % (st, doc))
        next_event(r, lambda k, d: k == "run" and d.get("id") == new and
                   d["change"] == "status" and d["status"] == "cancelled",
                   time.time() + 60, "the new run cancelled")
        c.close()
    finally:
        s.stop()


def test_events_escape_markup(tmp):
    """An event's data is JSON with '<', '>' and '&' escaped, as every
    answer of the API is ("Every string from the store is data"): a run
    whose root policy's name is markup was announced with it raw."""
    store = os.path.join(tmp, "store.mdb")
    run(os.path.join(BUILD, "tests", "web", "web_fixture"), store, "hostile",
        os.path.join(tmp, "script.json"))
    s = Server(store, env=env_without_token())
    try:
        st, doc, _ = s.get("/api/session")
        s.csrf = doc["csrf"]
        st, doc, _ = s.get("/api/runs/hostile-policy")
        policy = doc["run"]["root_policy"]
        check(st == 200 and "<img" in policy, "a policy of markup: %s" %
              policy)
        c, r = events(s)
        # a new run of that policy (its id last, as the poller looks for
        # new ones), which this server cannot continue: forked, not run
        st, doc, _ = s.post("/api/runs/hostile-policy/fork",
                            body={"at": "0:0", "new_id": "zz-fork"})
        check(st == 404 and doc["new_run"] == "zz-fork",
              "forked, not run here: %d %s" % (st, doc))
        deadline = time.time() + 60
        line = b""
        while b'"zz-fork"' not in line and time.time() < deadline:
            line = r.readline()
        check(line.startswith(b"data: ") and b"<" not in line and
              b">" not in line and b"&" not in line,
              "the event is announced with no markup in it: %r" % line)
        check(json.loads(line[6:])["root_policy"] == policy,
              "and reads back as the policy's name")
        c.close()
    finally:
        s.stop()


def test_runs_of_their_own_ids_announced(tmp):
    """Every run made while the server serves is announced "new", also one
    given an id of its own that sorts before the newest run's ("order-10"
    after "order-9"), which the poller's listing from the newest id never
    meets: such runs were never announced, nor watched."""
    store = os.path.join(tmp, "store.mdb")
    demo = [os.path.join(web_test.EX, "order-demo"), "--store", store,
            "--effects", os.path.join(tmp, "effects"), "--quiet", "--order"]
    run(*demo, "9")
    s = Server(store, env=env_without_token())
    try:
        c, r = events(s)
        run(*demo, "99")  # past the newest id: the poller's
        run(*demo, "10")  # before it: the next count's
        news = []
        next_event(r, lambda k, d: k == "run" and d["change"] == "new" and
                   news.append(d["id"]) is None and d["id"] == "order-10",
                   time.time() + 60, "order-10 new")
        # and once: a run the poller announced is not again by the count
        # that announced order-10 (it read order-99 next), nor one after
        run(*demo, "999")
        next_event(r, lambda k, d: k == "run" and d["change"] == "new" and
                   news.append(d["id"]) is None and d["id"] == "order-999",
                   time.time() + 60, "order-999 new")
        check(sorted(news) == ["order-10", "order-99", "order-999"],
              "each new run announced once: %s" % news)
        c.close()
    finally:
        s.stop()


def test_newer_code_refusal_is_409(tmp):
    """An action the engine refuses for a run newer code recorded
    (PL_ENEWERCODE: left as it was for that code's workers, which
    ledger-replay counts as refused, exit 1) is a refusal, 409, as the
    API's table says one is: it was a 500, the server's own failure."""
    store = os.path.join(tmp, "store.mdb")
    plugins = os.path.join(BUILD, "tests", "plugins")
    run(os.path.join(web_test.EX, "order-demo"), "--store", store,
        "--effects", os.path.join(tmp, "effects"), "--quiet", "--order", "1")
    # the order again from its start, by code whose version gate is at 2
    run(os.path.join(BUILD, "tools", "ledger-replay"), store, "--plugin",
        os.path.join(plugins, "order-plugin-v3-gated.so"), "--fork",
        "order-1", "--at", "0:0", "--new-id", "order-v2")
    s = Server(store, "--plugin",
               os.path.join(plugins, "order-plugin-v2-gated.so"),
               env=env_without_token())
    try:
        st, doc, _ = s.get("/api/session")
        s.csrf = doc["csrf"]
        st, doc, _ = s.get("/api/runs/order-v2")
        check(st == 200 and doc["run"]["status"] == "completed",
              "order-v2 completed by the newer code: %s" % doc["run"])
        st, doc, _ = s.post("/api/runs/order-v2/check")
        check(st == 200 and doc["check"] == "needs_newer_code",
              "a check says it needs newer code: %d %s" % (st, doc))
        st, doc, _ = s.post("/api/runs/order-v2/continue")
        check(st == 409 and doc["status"] == "not_run" and
              doc["error"] == "PL_ENEWERCODE" and doc["message"],
              "continuing it is refused, 409: %d %s" % (st, doc))
        st, doc, _ = s.get("/api/runs/order-v2")
        check(doc["run"]["status"] == "completed",
              "and left as it was: %s" % doc["run"]["status"])
    finally:
        s.stop()


def test_empty_parameters_and_long_reasons(tmp):
    """A parameter given empty is read as not given, as the list's filters
    read it ("Read as sent"): `window=`, a steps page's `limit=` and a
    batch's `dry_run=` were 400.  A batch cancel whose reason is longer
    than a cancellation takes was 200 with every run refused, while its
    dry run said it would cancel them: refused first, 400, both."""
    store = os.path.join(tmp, "store.mdb")
    run(GEN, store, "--queued", "2")
    s = Server(store, env=env_without_token())
    try:
        st, doc, _ = s.get("/api/session")
        s.csrf = doc["csrf"]
        st, doc, _ = s.get("/api/overview?window=")
        check(st == 200 and doc["window"] == "hour",
              "window= is the default window: %d %s" % (st, doc))
        st, doc, _ = s.get("/api/runs?limit=1")
        rid = doc["runs"][0]["id"]
        st, doc, _ = s.get("/api/runs/%s/steps?limit=" % rid)
        check(st == 200 and doc["limit"] == 200,
              "limit= is the default page: %d %s" % (st, doc))
        st, doc, _ = s.post("/api/batch/delete?status=completed&dry_run=")
        check(st == 200 and "dry_run" not in doc,
              "dry_run= is no dry run: %d %s" % (st, doc))
        long = "r" * 4097
        for dry in ("&dry_run=1", ""):
            st, doc, _ = s.post("/api/batch/cancel?status=submitted&reason=" +
                                long + dry)
            check(st == 400 and doc["error"] == "bad_reason",
                  "a reason over 4,096 bytes is refused%s: %d %s" %
                  (dry, st, doc))
        st, doc, _ = s.post("/api/batch/cancel?status=submitted&reason=" +
                            "r" * 4096)
        check(st == 200 and doc["cancelled"] == 2 and doc["refused"] == 0,
              "4,096 bytes are a reason: %d %s" % (st, doc))
    finally:
        s.stop()


CASES = [test_token_bounds, test_newest_runs_watched,
         test_events_escape_markup, test_runs_of_their_own_ids_announced,
         test_newer_code_refusal_is_409,
         test_empty_parameters_and_long_reasons]


def main():
    only = sys.argv[2:]
    for case in CASES:
        if only and case.__name__ not in only:
            continue
        tmp = tempfile.mkdtemp(prefix="pl-webp-")
        try:
            case(tmp)
            print("%s: ok" % case.__name__, flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print("web_promises: ok")


if __name__ == "__main__":
    main()
