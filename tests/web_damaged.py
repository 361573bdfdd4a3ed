#!/usr/bin/env python3
"""ledger-web over a store in which run records are damaged.

    web_damaged.py BUILD_DIR [--pg]

The order demo makes five runs (order-3 killed with SIGKILL: crashed);
then the run records of order-2 and order-5 (the newest by id) are
changed, a bit in every copy, so that reading them fails their
checksums (with --pg, a byte of the row in the runs table).  The real
server on loopback must list every sound run, show each damaged one as
damaged with its reason, in every page, filter, count and overview, and
answer a damaged run's own page with a clear error: never a 500 for the
whole list, and it starts.  Exits non-zero at the first failure.
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

EX = web_test.EX
PG = web_test.PG
SCHEMA = "web_damaged"
DAMAGED = ["order-2", "order-5"]


def damage_lmdb(path, run_id):
    """Flip a bit in every copy in the file of @run_id's run record (the
    order's root payload names it; a step carries that payload too, but
    only the run record has a "created" field)."""
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    head = b"\xa6policy\xa5order\xa7payload"
    order = run_id.split("-", 1)[1].encode()
    hits, at = 0, raw.find(head)
    while at >= 0:
        nxt = raw.find(head, at + 1)
        rec = raw[at:min(at + 400, nxt if nxt >= 0 else len(raw))]
        created = rec.find(b"\xa7created")
        # the payload's order_id, before the record's "created": the
        # window may run past the record into a step naming another order
        named = rec.find(b"\xa8order_id" + bytes([0xa0 | len(order)]) + order)
        if created >= 0 and 0 <= named < created:
            raw[at + created + 3] ^= 0x04
            hits += 1
        at = nxt
    check(hits > 0, "no run record of %s in the file" % run_id)
    with open(path, "wb") as f:
        f.write(raw)


def psql(query):
    p = subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", PG, "-c",
                        query], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "psql: %s" % p.stderr)
    return p.stdout.strip()


def damage_pg(run_id):
    """Flip a bit of the name "created" in @run_id's row of the runs
    table: the record then fails its checksum, as on LMDB."""
    key = "'\\x%s'::bytea" % run_id.encode().hex()
    info = bytes.fromhex(psql("SELECT encode(info, 'hex') FROM %s.runs "
                              "WHERE id = %s" % (SCHEMA, key)))
    at = info.find(b"\xa7created")
    check(at >= 0, "no run record of %s in the table" % run_id)
    psql("UPDATE %s.runs SET info = set_byte(info, %d, get_byte(info, %d) "
         "# 4) WHERE id = %s" % (SCHEMA, at + 3, at + 3, key))


def fill(store, tmp):
    demo = [os.path.join(EX, "order-demo"), "--store", store, "--effects",
            os.path.join(tmp, "effects"), "--quiet", "--order"]
    for order in ("1", "2", "4", "5"):
        run(*demo, order)
    run(*demo, "3", "--crash-after", "4", ok=(-9, 137))
    for run_id in DAMAGED:
        if PG:
            damage_pg(run_id)
        else:
            damage_lmdb(store, run_id)


def is_damaged(r):
    return (r.get("state") == "damaged" and "checksum" in r["damaged"] and
            r["id"] in r["damaged"])


def ids(doc):
    """The ids of a list's runs, a damaged one as "ID!"."""
    return [r["id"] + ("!" if is_damaged(r) else "") for r in doc["runs"]]


def pages(s, query):
    out, cursor, n = [], "", 0
    while True:
        st, doc, _ = s.get("/api/runs?%s&cursor=%s" % (query, cursor))
        check(st == 200, "GET /api/runs?%s&cursor=%s: 200 (%d %s)" %
              (query, cursor, st, doc))
        out += ids(doc)
        n += 1
        cursor = doc["next_cursor"]
        if not cursor or n > 10:
            return out


def lists(s):
    every = ["order-5!", "order-4", "order-3", "order-2!", "order-1"]
    st, doc, _ = s.get("/api/runs")
    check(st == 200 and ids(doc) == every,
          "the list shows every run, the damaged ones as damaged: %d %s" %
          (st, doc))
    st, doc, _ = s.get("/api/runs?order=asc")
    check(st == 200 and ids(doc) == every[::-1],
          "and oldest first: %d %s" % (st, doc))
    for limit in (1, 2):
        for order, want in (("desc", every), ("asc", every[::-1])):
            got = pages(s, "limit=%d&order=%s" % (limit, order))
            check(got == want, "pages of %d, %s: every run once: %s" %
                  (limit, order, got))
    # a damaged run's status is not known: it is shown whatever the
    # status, and alone with status=damaged
    for query, want in [
            ("status=completed", ["order-5!", "order-4", "order-2!",
                                  "order-1"]),
            ("status=crashed", ["order-5!", "order-3", "order-2!"]),
            ("status=damaged", ["order-5!", "order-2!"]),
            ("prefix=order-2", ["order-2!"]),
            ("prefix=order-1", ["order-1"]),
            ("prefix=order-5&order=asc", ["order-5!"])]:
        st, doc, _ = s.get("/api/runs?" + query)
        check(st == 200 and ids(doc) == want, "?%s: %s (%d %s)" %
              (query, want, st, doc))
    for query in ("", "?order=", "?order=asc"):
        st, doc, _ = s.get("/api/inbox" + query)
        check(st == 200 and ids(doc) == ["order-2!", "order-5!"] and
              doc["order"] == "asc",
              "the inbox%s names the damaged runs, whose state is not "
              "known, oldest first: %d %s" % (query, st, doc))


def counts(s):
    """The counts, once made, count the damaged runs apart."""
    deadline = time.time() + 120  # a guard, not a measure
    while True:
        st, doc, _ = s.get("/api/runs?limit=1")
        check(st == 200, "GET /api/runs?limit=1: %d %s" % (st, doc))
        if doc["counts_complete"] or time.time() > deadline:
            break
        time.sleep(0.2)
    c = doc["counts"]
    check(doc["counts_complete"] and doc["counts_total"] == 5 and
          c["damaged"] == 2 and c["completed"] == 2 and c["crashed"] == 1,
          "the counts: 2 completed, 1 crashed, 2 damaged of 5: %s" % doc)


def run_pages(s):
    for run_id in DAMAGED:
        for tail in ("", "/steps", "/timeline", "/export", "/step?id=0:1"):
            path = "/api/runs/%s%s" % (run_id, tail)
            st, body, h = s.get(path, raw=True)
            doc = json.loads(body)
            check(st == 500 and doc["error"] == "PL_ECORRUPT" and
                  "run '%s'" % run_id in doc["message"] and
                  "checksum" in doc["message"],
                  "GET %s: a clear error (%d %s)" % (path, st, doc))
        st, doc, _ = s.post("/api/runs/%s/continue" % run_id)
        check(st == 500 and doc["error"] == "PL_ECORRUPT" and
              run_id in doc["message"], "continuing %s is refused, saying "
              "why: %d %s" % (run_id, st, doc))
        # every action is refused for the record, as the reads refuse
        # it: a signal or a cancellation is not judged by the status a
        # damaged record names ("has ended")
        for action, body in (("signal", {"name": "go"}), ("cancel", None),
                             ("fork", {"at": "0:1"}),
                             ("upgrade", {"at": "0:1"}), ("delete", None),
                             ("answer", {}), ("check", None)):
            st, doc, _ = s.post("/api/runs/%s/%s" % (run_id, action), body)
            check(st == 500 and doc["error"] == "PL_ECORRUPT" and
                  doc["message"].startswith("reading the run: run '%s'" %
                                            run_id) and
                  "checksum" in doc["message"],
                  "%s of %s is refused as the reads refuse it: %d %s" %
                  (action, run_id, st, doc))
    st, doc, _ = s.get("/api/runs/order-4")
    check(st == 200 and doc["run"]["status"] == "completed",
          "a sound run's page: %d %s" % (st, doc))


def overview(s):
    st, doc, _ = s.get("/api/overview")
    check(st == 200, "the overview: 200 (%d %s)" % (st, doc))
    check(doc["scanned"] == 5 and
          [r["id"] for r in doc["damaged"] if is_damaged(r)] == ["order-5",
                                                                 "order-2"],
          "it reads every run and names the damaged ones: %s" % doc)
    done = sum(b["completed"] for b in doc["buckets"])
    check(done == 2, "its sound runs by status: %d completed" % done)


def batches(s):
    st, doc, _ = s.post("/api/batch/delete?prefix=order-&dry_run=1")
    check(st == 200 and doc["matched"] == 2 and
          [r["run_id"] for r in doc["runs"]] == ["order-4", "order-1"] and
          [r["run_id"] for r in doc["skipped"]] == ["order-5", "order-2"] and
          all("checksum" in r["message"] for r in doc["skipped"]),
          "a batch's dry run goes past the damaged runs, naming them: %d %s"
          % (st, doc))
    st, doc, _ = s.post("/api/batch/continue?status=crashed")
    check(st == 200 and doc["continued"] == 1 and
          doc["runs"][0]["run_id"] == "order-3" and
          doc["runs"][0]["status"] == "completed" and
          [r["run_id"] for r in doc["skipped"]] == ["order-5", "order-2"],
          "a batch continues the crashed run past the damaged ones: %d %s"
          % (st, doc))


def events(s, store, tmp):
    """The stream announces a run made while it is open: the poller
    starts past the newest run, order-5, damaged."""
    ev = http.client.HTTPConnection(s.host, s.port, timeout=60)
    ev.request("GET", "/api/events")
    er = ev.getresponse()
    check(er.status == 200 and er.readline().startswith(b"retry:"),
          "the event stream starts")
    run(os.path.join(EX, "order-demo"), "--store", store, "--effects",
        os.path.join(tmp, "effects"), "--quiet", "--order", "6")
    got = []
    while not any(b'"order-6"' in x for x in got):
        line = er.readline()  # the socket's timeout is the guard
        check(line, "the stream ends without order-6: %s" % got)
        got.append(line)
    ev.close()


def main():
    tmp = tempfile.mkdtemp(prefix="pl-web-damaged-")
    try:
        store = (PG + "&schema=" + SCHEMA if PG else
                 os.path.join(tmp, "store.mdb"))
        fill(store, tmp)
        env = dict(os.environ, ORDER_EFFECTS=os.path.join(tmp, "effects"))
        env.pop("PL_WEB_TOKEN", None)
        s = Server(store, "--plugin", os.path.join(EX, "order-plugin.so"),
                   env=env)
        try:
            st, doc, _ = s.get("/api/session")
            s.csrf = doc["csrf"]
            lists(s)
            counts(s)
            run_pages(s)
            overview(s)
            batches(s)
            events(s, store, tmp)
        finally:
            s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("web_damaged: ok (%s)" % ("postgresql" if PG else "lmdb"))


if __name__ == "__main__":
    sys.exit(main())
