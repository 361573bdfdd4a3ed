#!/usr/bin/env python3
"""A small HTTP server for tests/test_tools.c, on the standard library alone.

It listens on 127.0.0.1 on a port the kernel picks, prints that port on one
line, and serves until it is killed (or its parent dies).

  /ok              200 "hello" (text/plain)
  /key             200, the request's Idempotency-Key header as the body
  /notfound        404
  /auth            401
  /forbidden       403
  /limited         429 with Retry-After: 7
  /error           500
  /unavailable     503
  /hang            sends nothing for 60 s
  /big             200, 2 MiB of 'x'
  /binary          200, bytes with a NUL among them
  /redirect-in     302 to /ok
  /redirect-out    302 to http://example.com/ (a host not allowed)
  /redirect-file   302 to file:///etc/passwd
  /redirect-loop   302 to itself
  /slow-redirect   after 0.4 s, 302 to /slow-ok
  /slow-ok         after 0.4 s, 200 "slow"
"""
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send(self, status, body=b"", ctype="text/plain", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def redirect(self, location):
        self.send(302, b"", headers=[("Location", location)])

    def do_GET(self):
        p = self.path
        if p == "/ok":
            self.send(200, b"hello")
        elif p == "/key":
            self.send(200, self.headers.get("Idempotency-Key", "").encode())
        elif p == "/notfound":
            self.send(404, b"no such page")
        elif p == "/auth":
            self.send(401, b"who are you")
        elif p == "/forbidden":
            self.send(403, b"not for you")
        elif p == "/gone":
            self.send(410, b"gone for good")
        elif p == "/teapot":
            self.send(418, b"short and stout")
        elif p == "/limited":
            self.send(429, b"slow down", headers=[("Retry-After", "7")])
        elif p == "/error":
            self.send(500, b"oops")
        elif p == "/unavailable":
            self.send(503, b"later")
        elif p == "/hang":
            time.sleep(60)
        elif p == "/big":
            self.send(200, b"x" * (2 * 1024 * 1024))
        elif p == "/binary":
            self.send(200, b"ab\x00cd", ctype="application/octet-stream")
        elif p == "/redirect-in":
            self.redirect("/ok")
        elif p == "/redirect-out":
            self.redirect("http://example.com/")
        elif p == "/redirect-file":
            self.redirect("file:///etc/passwd")
        elif p == "/redirect-loop":
            self.redirect("/redirect-loop")
        elif p == "/slow-redirect":
            time.sleep(0.4)
            self.redirect("/slow-ok")
        elif p == "/slow-ok":
            time.sleep(0.4)
            self.send(200, b"slow")
        else:
            self.send(404, b"unknown path")


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hangs up early (the body cap, a timeout)


def watch_parent(parent):
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def main():
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=watch_parent, args=(os.getppid(),),
                     daemon=True).start()
    sys.stdout.write("%d\n" % server.server_address[1])
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
