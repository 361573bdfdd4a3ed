#!/usr/bin/env python3
"""ledger-replay --trace and --otel on real stores: the order demo killed
with SIGKILL at every step boundary, then finished by ledger-replay with a
JSON-lines trace and spans sent to a loopback OTLP receiver
(tests/llm_server.py, which logs every request body).

Checks every trace line parses as JSON with the run id as trace id, the
invocation paths, policy names, served versus executed calls and their
timings; the spans' derived ids, the call tree, served calls marked; a
receiver that is down or failing never changes a run's outcome; bad flags
get a clear error.  Standard library only.  Exits 1 if any case fails.
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
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


def run(argv, env=None, expect=None):
    full_env = dict(os.environ)
    for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
              "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME"):
        full_env.pop(k, None)
    full_env.update(env or {})
    p = subprocess.run(argv, capture_output=True, text=True, env=full_env,
                       timeout=120)
    for mark in SANITIZER_MARKS:
        check(mark not in p.stderr, "sanitizer report from %s" % argv[0],
              p.stderr)
    if expect is not None:
        check(p.returncode == expect,
              "%s exited %d, expected %d" % (" ".join(argv[1:]), p.returncode,
                                             expect),
              "stdout: " + p.stdout, "stderr: " + p.stderr)
    return p


class Receiver:
    """tests/llm_server.py answering every request with @p rest."""

    def __init__(self, tmp, rest):
        self.log = os.path.join(tmp, "otlp.log")
        script = os.path.join(tmp, "otlp-script.json")
        port_file = os.path.join(tmp, "otlp.port")
        with open(script, "w") as f:
            json.dump({"responses": [], "rest": rest}, f)
        self.proc = subprocess.Popen(
            [sys.executable, ARGS.server, "--script", script, "--log",
             self.log, "--port-file", port_file])
        for _ in range(1000):
            if os.path.exists(port_file):
                break
            check(self.proc.poll() is None, "the receiver exited at start")
            time.sleep(0.02)
        with open(port_file) as f:
            self.url = "http://127.0.0.1:%s" % f.read().strip()

    def requests(self):
        try:
            with open(self.log) as f:
                return [json.loads(l) for l in f]
        except FileNotFoundError:
            return []

    def spans(self):
        out = []
        for r in self.requests():
            check(r["path"] == "/v1/traces", "wrong path", r["path"])
            check(r["content_type"] == "application/json",
                  "wrong content type", r["content_type"])
            for rs in r["body"]["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    out += ss["spans"]
        return out

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def attrs(span):
    out = {}
    for kv in span["attributes"]:
        (v,) = kv["value"].values()
        out[kv["key"]] = v
    return out


def hexid(run_id, path, n):
    data = run_id.encode() + (b"\0" + path.encode() if path is not None
                              else b"")
    return hashlib.sha256(data).hexdigest()[:2 * n]


def crash_demo(tmp, n):
    """order-demo killed at boundary n; the run id, or None past the end."""
    store = os.path.join(tmp, "store.db")
    order = "T-%d" % n
    p = run([ARGS.demo, "--store", store, "--effects",
             os.path.join(tmp, "effects.txt"), "--order", order, "--quiet",
             "--plugin", ARGS.order_plugin, "--crash-after", str(n)])
    if p.returncode == 0:
        return None
    check(p.returncode == -signal.SIGKILL, "order-demo did not die", n,
          p.returncode, p.stderr)
    return "order-" + order


def replay(tmp, *args, expect=0, env=None):
    return run([ARGS.tool, os.path.join(tmp, "store.db"), "--plugin",
                ARGS.order_plugin] + list(args), env=env, expect=expect)


def check_trace(path, run_id, summary):
    with open(path) as f:
        lines = [l for l in f]
    check(lines, "an empty trace")
    events = []
    for l in lines:
        check(l.endswith("\n"), "a line without its newline", l)
        try:
            events.append(json.loads(l))
        except ValueError as e:
            raise Failure("a trace line is not JSON: %s: %r" % (e, l))
    check(all(e["trace_id"] == run_id for e in events),
          "trace id is not the run id", events)
    check(all(isinstance(e.get("ts_us"), int) for e in events), "no ts_us",
          [e for e in events if not isinstance(e.get("ts_us"), int)])
    kinds = [e["event"] for e in events]
    check(kinds[0] == "run_started" and kinds[-1] == "run_completed",
          "a run starts and ends", kinds)
    ends = [e for e in events if e["event"] in ("call_served",
                                                 "call_completed")]
    served = [e for e in ends if e["outcome"] == "served"]
    executed = [e for e in ends if e["outcome"] == "completed"]
    check(len(served) == summary["calls_served"]
          and len(executed) == summary["calls_executed"],
          "served/executed in the trace differ from the summary", summary,
          ends)
    for e in ends + [events[-1]]:
        check(isinstance(e.get("elapsed_ns"), int) and e["elapsed_ns"] >= 0,
              "an end without elapsed_ns", e)
    for e in ends:
        check(e["path"] == "0" and isinstance(e["seq"], int),
              "a call without its caller's path and position", e)
        check(e["policy"] in ("reserve_stock", "charge_card", "ship"),
              "an unknown policy", e)
    for e in events:
        if e["event"] in ("step_appended", "step_replayed"):
            check(e["path"].startswith("0") and "step_type" in e,
                  "a step event without path or type", e)
    return served, executed


def check_spans(spans, run_id, served_n, executed_n):
    mine = [s for s in spans if attrs(s)["policyledger.run_id"] == run_id]
    by_path = {}
    for s in mine:
        a = attrs(s)
        path = a["policyledger.path"]
        check(s["traceId"] == hexid(run_id, None, 16), "trace id", s)
        check(s["spanId"] == hexid(run_id, path, 8), "span id", s)
        check(int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"]),
              "a span ends before it starts", s)
        if path == "0":
            check("parentSpanId" not in s and s["name"] == "run order",
                  "the run's span", s)
        else:
            parent = path.rsplit(".", 1)[0]
            check(s["parentSpanId"] == hexid(run_id, parent, 8),
                  "a call's parent is its caller's span", s)
            check(s["name"] == a["policyledger.policy"], "the span's name", s)
        by_path[path] = s
    calls = [s for s in mine if attrs(s)["policyledger.path"] != "0"]
    served = [s for s in calls if attrs(s)["policyledger.served"] is True]
    check(len(served) == served_n and len(calls) - len(served) == executed_n,
          "served and executed spans", served_n, executed_n, calls)
    for s in served:
        check(attrs(s)["policyledger.outcome"] == "served", "outcome", s)
    root = by_path.get("0")
    check(root is not None, "no span for the run", mine)
    for s in calls:
        check(int(root["startTimeUnixNano"]) <= int(s["startTimeUnixNano"])
              and int(s["endTimeUnixNano"]) <= int(root["endTimeUnixNano"]),
              "a call outside its run", s, root)


def case_crash_then_replay_traced():
    """At every crash point: --run with --trace FILE and --otel URL."""
    tmp = tempfile.mkdtemp(prefix="replay-trace-")
    rx = Receiver(tmp, {"status": 200, "body": {}})
    try:
        crashed = 0
        for n in range(1, 40):
            run_id = crash_demo(tmp, n)
            if run_id is None:
                break
            crashed += 1
            trace = os.path.join(tmp, "trace-%d.jsonl" % n)
            p = replay(tmp, "--run", run_id, "--json", "--trace", trace,
                       "--otel", rx.url)
            doc = json.loads(p.stdout)
            summary = doc["runs"][0]
            check(summary["status"] == "completed", "not completed", summary)
            served, executed = check_trace(trace, run_id, summary)
            check_spans(rx.spans(), run_id, len(served), len(executed))
        check(crashed >= 3, "too few crash points", crashed)
    finally:
        rx.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def case_trace_to_stderr_and_otel_from_env():
    tmp = tempfile.mkdtemp(prefix="replay-trace-")
    rx = Receiver(tmp, {"status": 200, "body": {}})
    try:
        run_id = crash_demo(tmp, 3)
        # an OTEL_SERVICE_NAME set empty names no service: the tool's
        p = replay(tmp, "--run", run_id, "--trace", "-",
                   env={"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url,
                        "OTEL_EXPORTER_OTLP_HEADERS": "x-team=orders",
                        "OTEL_SERVICE_NAME": ""})
        lines = [json.loads(l) for l in p.stderr.splitlines()
                 if l.startswith("{")]
        check(lines and lines[-1]["event"] == "run_completed"
              and all(l["trace_id"] == run_id for l in lines),
              "no trace on stderr", p.stderr)
        spans = rx.spans()
        check(any(attrs(s)["policyledger.path"] == "0" for s in spans),
              "the environment's endpoint got no run span", spans)
        svc = rx.requests()[0]["body"]["resourceSpans"][0]["resource"]
        check(svc["attributes"][0]["value"]["stringValue"] == "ledger-replay",
              "service name", svc)
    finally:
        rx.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def case_check_traced():
    """--check (and so --upgrade) replays traced as --run does: each
    replay's events in the file, each call served."""
    tmp = tempfile.mkdtemp(prefix="replay-trace-")
    rx = Receiver(tmp, {"status": 200, "body": {}})
    try:
        run_id = crash_demo(tmp, 3)
        replay(tmp, "--run", run_id)
        trace = os.path.join(tmp, "check.jsonl")
        p = replay(tmp, "--check", "--run", run_id, "--json", "--trace",
                   trace, "--otel", rx.url)
        summary = json.loads(p.stdout)["runs"][0]
        check(summary["check"] == "ok" and summary["calls_served"] == 3,
              "not checked", summary)
        served, executed = check_trace(trace, run_id, summary)
        check(len(served) == 3 and not executed, "the check's calls",
              served, executed)
        check_spans(rx.spans(), run_id, 3, 0)
    finally:
        rx.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def case_a_collector_that_is_down_or_failing():
    """The run completes and the tool exits 0; a warning counts the spans."""
    tmp = tempfile.mkdtemp(prefix="replay-trace-")
    rx = Receiver(tmp, {"status": 500, "body": {}})
    try:
        run_id = crash_demo(tmp, 3)
        p = replay(tmp, "--run", run_id, "--otel",
                   "http://127.0.0.1:%d" % free_port(), expect=0)
        check("completed" in p.stdout, "the run did not complete", p.stdout)
        check("spans were not delivered" in p.stderr, "no warning", p.stderr)
        run_id = crash_demo(tmp, 4)
        p = replay(tmp, "--run", run_id, "--otel", rx.url, expect=0)
        check("HTTP 500" in p.stderr, "no warning naming the answer",
              p.stderr)
        check(rx.requests(), "the failing receiver was never asked")
    finally:
        rx.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def case_bad_flags():
    tmp = tempfile.mkdtemp(prefix="replay-trace-")
    try:
        run_id = crash_demo(tmp, 3)
        p = replay(tmp, "--run", run_id, "--trace",
                   os.path.join(tmp, "no", "such", "dir", "t.jsonl"),
                   expect=1)
        check("--trace" in p.stderr and "cannot open" in p.stderr,
              "no clear error", p.stderr)
        # a FIFO no process reads: refused at once, not waited on
        fifo = os.path.join(tmp, "trace.fifo")
        os.mkfifo(fifo)
        p = replay(tmp, "--run", run_id, "--trace", fifo, expect=1)
        check("--trace" in p.stderr and "FIFO no process reads" in p.stderr,
              "no clear error", p.stderr)
        p = replay(tmp, "--run", run_id, "--otel", "ftp://127.0.0.1:1",
                   expect=1)
        check("--otel" in p.stderr and "http" in p.stderr, "no clear error",
              p.stderr)
        p = replay(tmp, "--run", run_id, "--otel", "http://127.0.0.1:1",
                   env={"OTEL_EXPORTER_OTLP_HEADERS": "token=HIDDEN,bad"},
                   expect=1)
        check("HIDDEN" not in p.stderr and "header 2" in p.stderr,
              "a header value in an error", p.stderr)
        # no --otel given: the error names the variable that asked for the
        # exporter, not a flag the command line does not hold
        for var in ("OTEL_EXPORTER_OTLP_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            p = replay(tmp, "--run", run_id, env={var: "ftp://127.0.0.1:1"},
                       expect=1)
            check(p.stderr.startswith("ledger-replay: %s: " % var)
                  and "--otel" not in p.stderr, "the error blames --otel",
                  p.stderr)
        p = replay(tmp, "--run", run_id,
                   env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                        "OTEL_EXPORTER_OTLP_HEADERS": "token=HIDDEN,bad"},
                   expect=1)
        check("OTEL_EXPORTER_OTLP_HEADERS" in p.stderr
              and "--otel" not in p.stderr and "HIDDEN" not in p.stderr,
              "the error does not name OTEL_EXPORTER_OTLP_HEADERS", p.stderr)
        p = replay(tmp, "--run", run_id, "--trace", expect=1)
        check("needs a value" in p.stderr, "no clear error", p.stderr)
        # nothing ran: the run is still there to finish
        p = replay(tmp, "--run", run_id, expect=0)
        check("completed" in p.stdout, "the run did not complete", p.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


CASES = [case_crash_then_replay_traced, case_trace_to_stderr_and_otel_from_env,
         case_check_traced, case_a_collector_that_is_down_or_failing,
         case_bad_flags]


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    for name in ("tool", "demo", "order-plugin", "server"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("cases", nargs="*")
    ARGS = ap.parse_args()
    failed = 0
    for case in CASES:
        if ARGS.cases and case.__name__ not in ARGS.cases:
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
