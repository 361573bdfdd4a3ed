#!/usr/bin/env python3
"""A loopback HTTP server speaking the OpenAI chat completions protocol from
a script of responses, for the LLM policy tests.  Standard library only.

  llm_server.py --script FILE --log FILE --port-file FILE

The script is {"responses": [R, ...]}; the n-th POST gets R[n] (past the end,
a 500).  With "by_turn": true, a request gets R[t] instead, t the number of
assistant messages it carries: the same conversation, the same answer, as
a model that is asked again after a crash.  R is one of:
  {"status": 200, "body": {...}, "headers": {"Retry-After": "1"}}
  {"raw": "text", "status": 200}     a body that is not JSON
  {"hang": SECONDS}                   answer nothing for that long
  {"drop": true}                      close the connection, no response
  {"size": N}                         a 200 whose body is N bytes
Each request is logged before it is answered, one JSON line:
  {"n": index, "path": ..., "auth": "none"|"bearer"|"other",
   "auth_matches": bool (the key equals $PL_TEST_EXPECT_KEY),
   "x_api_key_matches": bool (so does the x-api-key header),
   "anthropic_version": header or null, "sha256": the body's SHA-256 in
   hex, "bytes": its length, "body": {...}}
The key itself is never logged.  The port is written to --port-file once
the server listens.
"""
import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
state = {"n": 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    with open(args.script) as f:
        script = json.load(f)
    responses = script["responses"]
    by_turn = script.get("by_turn", False)
    expect = os.environ.get("PL_TEST_EXPECT_KEY", "")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            auth = self.headers.get("Authorization")
            kind = "none"
            matches = False
            if auth is not None:
                kind = "bearer" if auth.startswith("Bearer ") else "other"
                matches = auth == "Bearer " + expect
            turn = 0
            if isinstance(body, dict):
                turn = sum(1 for m in body.get("messages", [])
                           if isinstance(m, dict)
                           and m.get("role") == "assistant")
            xkey = self.headers.get("x-api-key")
            version = self.headers.get("anthropic-version")
            with lock:
                n = state["n"]
                state["n"] += 1
                with open(args.log, "a") as log:
                    log.write(json.dumps({"n": n, "turn": turn,
                                          "path": self.path,
                                          "auth": kind,
                                          "auth_matches": matches,
                                          "x_api_key_matches":
                                              xkey is not None
                                              and xkey == expect,
                                          "anthropic_version": version,
                                          "sha256":
                                              hashlib.sha256(raw).hexdigest(),
                                          "bytes": len(raw),
                                          "body": body}) + "\n")
            i = turn if by_turn else n
            r = responses[i] if i < len(responses) else {
                "status": 500, "body": {"error": {"message": "script ended"}}}
            if "hang" in r:
                time.sleep(r["hang"])
                self.close_connection = True
                return
            if r.get("drop"):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if "size" in r:
                data = b"x" * r["size"]
            elif "raw" in r:
                data = r["raw"].encode()
            else:
                data = json.dumps(r.get("body", {})).encode()
            self.send_response(r.get("status", 200))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in r.get("headers", {}).items():
                self.send_header(k, v)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a client that gave up (a timeout test) is no error here

    srv = Server(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, args.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
