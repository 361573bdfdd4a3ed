"""ledger-web under hostile requests: bytes a client chooses, sent raw
over sockets (http.client would refuse or rewrite some of them).

web_test.py calls attacks() on a server it started on its filled store
(LMDB or PostgreSQL).  Each check is an attack and what the server must
answer; none measures a time (the socket timeouts are guards against a
server that never answers).
"""
import json
import os
import re
import socket
import threading
import time

GUARD = 120  # seconds a socket waits before the server is deemed stuck


def raw(s, data, src="127.0.0.1", timeout=GUARD):
    """Send @data on a new connection from address @src; the bytes
    answered until the server closes (b"" if it closed at once)."""
    c = socket.socket()
    c.bind((src, 0))
    c.settimeout(timeout)
    c.connect((s.host, s.port))
    out = b""
    try:
        c.sendall(data)
        while True:
            b = c.recv(65536)
            if not b:
                break
            out += b
    except (ConnectionResetError, BrokenPipeError, TimeoutError):
        pass  # the status parse() finds (or not) says what happened
    finally:
        c.close()
    return out


def get(s, path, headers="", src="127.0.0.1"):
    data = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n%s\r\n"
            % (path, s.host, s.port, headers)).encode("latin1")
    return parse(raw(s, data, src))


def post(s, path, headers="", body=b""):
    data = ("POST %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n"
            "X-CSRF-Token: %s\r\nContent-Length: %d\r\n%s\r\n" %
            (path, s.host, s.port, s.csrf, len(body), headers)).encode()
    return parse(raw(s, data + body))


def parse(resp):
    """(status, content type, body) of a raw answer; status None when the
    connection closed without one."""
    m = re.match(rb"HTTP/1\.[01] (\d+)", resp)
    head, _, body = resp.partition(b"\r\n\r\n")
    t = re.search(rb"(?i)\r\ncontent-type: ([^\r]*)", head)
    return (int(m.group(1)) if m else None,
            t.group(1).decode() if t else "", body)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def attacks(s, check):
    paths_and_params(s, check)
    posts(s, check)
    slow_clients(s, check)
    event_streams(s, check)
    exports(s, check)
    stalled_streams(s, check)


def paths_and_params(s, check):
    # %00 decoded was a NUL that cut the path: "/app.js%00.html" served
    # app.js, "order-1%00" read order-1, "failed%00x" filtered by failed
    for path, code in [("/app.js%00.html", 404), ("/%00", 404),
                       ("/api/runs/order-1%00", 400),
                       ("/api/runs/order-1%00/steps", 400),
                       ("/api/runs?status=failed%00x", 400),
                       ("/api/runs?status=%00", 400)]:
        st, ctype, body = get(s, path)
        check(st == code and ctype.startswith("application/json") and
              b'"error"' in body, "GET %s: %d (%s %s)" %
              (path, code, st, body[:200]))
    st, _, _ = get(s, "/api/runs?q=%00")
    check(st == 200, "q=%%00 is searched for as text (%s)" % st)
    # a parameter given twice: one of them would be ignored
    # (libmicrohttpd looks a parameter up without case: "LIMIT=600" beside
    # "limit=5" was not seen as the same, and the first was read)
    for q in ["limit=5&limit=600", "status=failed&status=running",
              "prefix=a&prefix=b", "limit=3&limit=3", "limit=5&LIMIT=600",
              "Status=failed&status=running"]:
        st, _, body = get(s, "/api/runs?" + q)
        check(st == 400 and b"duplicate_parameter" in body,
              "?%s: 400 (%s %s)" % (q, st, body[:200]))
    st, _, _ = get(s, "/api/runs?x=1&x=2&limit=2")
    check(st == 200, "an unknown parameter twice is ignored (%s)" % st)
    # a number is digits only
    for path in ["/api/runs?limit=+5", "/api/runs?limit=%205",
                 "/api/runs?limit=-0", "/api/runs?limit=99999999999999999999",
                 "/api/runs/order-1/steps?limit=+5",
                 "/api/runs/order-1/steps?limit=%205"]:
        st, _, body = get(s, path)
        check(st == 400 and b"bad_limit" in body, "%s: 400 (%s %s)" %
              (path, st, body[:200]))
    # paths: traversal, encodings, sizes, control bytes; every answer a
    # JSON 4xx (a URL over the header memory: libmicrohttpd's 414 page)
    for path in ["/assets/../../etc/passwd", "/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
                 "/%252e%252e%252fetc%252fpasswd", "/..\\..\\etc\\passwd",
                 "/api/runs/%ff%fe", "/api/runs/%01%02", "/api/runs/a%2Fb",
                 "/api/runs/" + "x" * 5000, "/api/runs/", "/api/runs//steps",
                 "/api/runs/order-1/steps/", "/api/nothing",
                 "/api/runs/order-1/step?id=" + "0." * 300 + "0:1"]:
        st, ctype, body = get(s, path)
        check(st in (400, 404) and ctype.startswith("application/json"),
              "GET %s: a JSON 4xx (%s %s)" % (path[:60], st, body[:200]))
    limits(s, check)
    # a thousand parameters filled a connection's 64 KiB with their
    # records: libmicrohttpd closed it without an answer.  Over 100 are
    # dropped before it reads them, and the request refused
    for n in [101, 1000, 2000, 5000]:
        for sep, fmt in [("&", "p%d=%d"), ("&", "")]:
            many = sep.join(fmt % (i, i) if fmt else "" for i in range(n))
            st, ctype, body = get(s, "/api/runs?" + many)
            check(st == 400 and ctype.startswith("application/json") and
                  b"too_many_parameters" in body,
                  "%d parameters (%d bytes): 400 (%s %s)" %
                  (n, len(many), st, body[:200]))
    many = "&".join("p%d=%d" % (i, i) for i in range(2000))
    st, ctype, body = get(s, "/app.js?" + many)
    check(st == 400 and ctype.startswith("text/plain") and
          b"2000 query parameters" in body,
          "2,000 parameters to a page's file: a plain 400 (%s %s %s)" %
          (st, ctype, body[:200]))
    st, _, body = get(s, "/api/runs?limit=2&" +
                      "&".join("p%d=%d" % (i, i) for i in range(99)))
    check(st == 200, "100 parameters are taken (%s %s)" % (st, body[:200]))
    # a target over 64 KiB: ours, whatever it holds
    many = "&".join("p%d=%d" % (i, i) for i in range(10000))
    st, ctype, body = get(s, "/api/runs?" + many)
    check(st == 414 and ctype == "application/json" and
          b"uri_too_long" in body,
          "10,000 parameters (107 KB): a JSON 414 (%s %s)" % (st, body[:200]))
    st, _, _ = get(s, "/api/runs?limit=1")
    check(st == 200, "and the server still answers (%s)" % st)


def limits(s, check):
    """A request's line and headers at libmicrohttpd's limits: 64 KiB of
    them (and 100 header lines) taken, more refused with our JSON, and
    libmicrohttpd's own page only for one it cannot hold (128 KiB)."""
    def json_error(st, ctype, body, code, error):
        return (st == code and ctype == "application/json" and
                json.loads(body)["error"] == error)
    n = 1 << 16  # the longest target, and line and headers, taken
    st, _, body = get(s, "/api/runs/" + "x" * (n - 200))
    check(st == 404 and b"no such API path" in body,
          "a line and headers of 64 KiB are read (%s %s)" % (st, body[:100]))
    st, ctype, body = get(s, "/api/runs/" + "x" * (n - 20))
    check(json_error(st, ctype, body, 431, "headers_too_large"),
          "a line and headers over 64 KiB: a JSON 431 (%s %s %s)" %
          (st, ctype, body[:200]))
    st, ctype, body = get(s, "/api/runs/" + "x" * (n + 1 - len("/api/runs/")))
    check(json_error(st, ctype, body, 414, "uri_too_long"),
          "a byte more: a JSON 414 (%s %s %s)" % (st, ctype, body[:200]))
    # a request line within about 1 KB of 64 KiB left libmicrohttpd no room
    # to answer in its 64 KiB: the connection was closed without an answer
    for k in range(64700, 65600, 25):
        path = "/api/runs/" + "x" * (k - len("/api/runs/"))
        st, ctype, body = get(s, path)
        check(st in (404, 414, 431) and ctype == "application/json",
              "a target of %d bytes: a JSON answer (%s %s %s)" %
              (k, st, ctype, body[:100]))
    # header lines: 100 taken (Host and Connection among them), more
    # refused; ~1,000 of them were libmicrohttpd's HTML 431
    for lines, code in [(98, 200), (99, 431), (1000, 431)]:
        hdrs = "".join("X-H%d: v\r\n" % i for i in range(lines))
        st, ctype, body = get(s, "/api/runs?limit=1", hdrs)
        check(st == code and ctype == "application/json" and
              (code == 200 or b"headers_too_large" in body),
              "%d header lines and 2: %d (%s %s)" % (lines, code, st,
                                                     body[:200]))
    st, ctype, body = get(s, "/api/runs", "X-Big: %s\r\n" % ("b" * n))
    check(json_error(st, ctype, body, 431, "headers_too_large"),
          "a 64 KiB header: a JSON 431 (%s %s)" % (st, body[:200]))
    # what libmicrohttpd cannot hold it answers itself, HTML
    st, ctype, _ = get(s, "/api/runs/" + "x" * (1 << 20))
    check(st == 414 and ctype == "", "a 1 MB path: its 414 (%s %s)" %
          (st, ctype))
    hdrs = "".join("X-H%d: v\r\n" % i for i in range(3000))
    st, ctype, _ = get(s, "/api/runs", hdrs)
    check(st == 431 and ctype == "", "3,000 header lines: its 431 (%s %s)" %
          (st, ctype))


def posts(s, check):
    # a page of another origin may not act, even holding the token
    origin = "http://%s:%d" % (s.host, s.port)
    for h in ["Origin: http://evil.example\r\n", "Origin: null\r\n",
              "Origin: %s.evil.example\r\n" % origin,
              "Origin: http://localhost:%d\r\n" % s.port,
              "Sec-Fetch-Site: cross-site\r\n",
              "Sec-Fetch-Site: same-site\r\n"]:
        st, _, body = post(s, "/api/runs/order-1/verify", h)
        check(st == 403 and b'"origin"' in body, "a POST with %s: 403 (%s %s)"
              % (h.strip(), st, body[:200]))
    for h in ["Origin: %s\r\n" % origin, "Sec-Fetch-Site: same-origin\r\n",
              ""]:
        st, _, body = post(s, "/api/runs/order-1/verify", h)
        check(st == 200, "a POST with %r: 200 (%s %s)" % (h, st, body[:200]))
    # bodies: none, not JSON, too deep, of the wrong types
    for path, body, code in [
            ("/api/runs/order-1/answer", b"", 400),
            ("/api/runs/order-1/answer", b"[" * 100000, 400),
            ("/api/runs/order-1/signal", b'{"name": 5}', 400),
            ("/api/runs/order-1/fork", b'{"at": [1]}', 400),
            ("/api/runs/order-1/cancel", b'{"reason": {}}', 400),
            ("/api/runs/order-1/answer", b'{"a": 1}\x00', 400),
            ("/api/runs/nope/continue", b"", 404),
            ("/api/runs/nope/signal", b'{"name": "x"}', 404)]:
        st, ctype, out = post(s, path, body=body)
        check(st == code and ctype.startswith("application/json"),
              "POST %s %r: %d (%s %s)" % (path, body[:20], code, st, out[:200]))
    # \u0000 made cJSON end a string there: the event "a\u0000b" was
    # delivered as "a"; bytes that are not UTF-8 were stored as they came
    for path, body in [("/api/runs/order-1/signal", b'{"name": "a\\u0000b"}'),
                       ("/api/runs/order-1/cancel",
                        b'{"reason": "x\\u0000"}'),
                       ("/api/runs/order-1/signal", b'{"name": "\xff\xfe"}'),
                       ("/api/runs/order-1/signal",
                        b'{"name": "\xed\xa0\x80"}'),
                       ("/api/runs/order-1/fork", b'{"at": "0:1\xc0\xaf"}')]:
        st, _, out = post(s, path, body=body)
        check(st == 400 and b"bad_json" in out, "POST %s %r: 400 (%s %s)" %
              (path, body, st, out[:200]))
    st, _, out = post(s, "/api/runs/order-1/cancel",
                      body=b'{"reason": "\\\\u0000 is text"}')
    check(st == 409, "an escaped backslash before u0000 is text: 409 (%s %s)"
          % (st, out[:200]))
    # an answer is UTF-8, whatever the request held: a byte that is not
    # UTF-8 quoted in its message as \xff (cli_quote())
    for path in ["/api/runs/order-1/%ff", "/api/batch/%ff%fe"]:
        st, _, out = post(s, path)
        try:
            out.decode("utf-8")
        except UnicodeDecodeError:
            out = b"not UTF-8: " + out
        check(st == 404 and b"\\\\xff" in out,
              "POST %s: 404 in UTF-8 (%s %s)" % (path, st, out[:200]))
    # a name quoted in a message: a run of bytes that continue a UTF-8
    # sequence none began was copied past the quote's buffer (cli_quote(),
    # found by fuzz_web): a stack overflow in the server
    for path, n in [("/api/batch/" + "%81" * 300, 300),
                    ("/api/runs/order-1/" + "%bf" * 5000, 5000),
                    ("/api/batch/a%c3" + "%a9" * 300, 302)]:
        st, ctype, out = post(s, path)
        check(st == 404 and ctype.startswith("application/json") and
              b"... (%d bytes)" % n in out,
              "POST %s...: 404, the name cut (%s %s)" % (path[:30], st,
                                                          out[:200]))
    # a fork to an id that exists: the client's conflict, not the server's
    st, _, out = post(s, "/api/runs/order-1/fork",
                      body=b'{"at": "0:2", "new_id": "order-2"}')
    check(st == 409 and b"PL_EEXIST" in out,
          "a fork to a taken id: 409 (%s %s)" % (st, out[:200]))
    # 100 MB, chunked: a 413 once past 1 MiB, and the memory stays
    pid = s.proc.pid
    before = rss_kb(pid)
    c = socket.create_connection((s.host, s.port), timeout=GUARD)
    c.sendall(("POST /api/runs/order-1/answer HTTP/1.1\r\nHost: %s:%d\r\n"
               "X-CSRF-Token: %s\r\nTransfer-Encoding: chunked\r\n"
               "Connection: close\r\n\r\n" % (s.host, s.port, s.csrf)).encode())
    chunk = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"
    try:
        for _ in range(100):
            c.sendall(chunk)
        c.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            out += b
    except ConnectionResetError:
        pass
    c.close()
    st = parse(out)[0]
    grown = rss_kb(pid) - before
    check(st == 413 and grown < 32 << 10,
          "a 100 MB body: 413 (%s), the server grew %d KiB" % (st, grown))


def trickle(s, n, stop, src="127.0.0.1"):
    """@n connections from @src that send a request's headers a byte a
    second, until @stop is set; the list of their sockets."""
    socks = []
    for _ in range(n):
        c = socket.socket()
        c.bind((src, 0))
        c.settimeout(GUARD)
        c.connect((s.host, s.port))
        try:
            c.sendall(b"GET /api/session HTTP/1.1\r\nX-Slow: ")
        except OSError:
            pass
        socks.append(c)

    def run():
        while not stop.is_set():
            for c in socks:
                try:
                    c.send(b"x")
                except OSError:
                    pass
            stop.wait(1)
    threading.Thread(target=run, daemon=True).start()
    return socks


def closed(c):
    c.setblocking(False)
    try:
        return c.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def slow_clients(s, check):
    # 70 connections sending their headers a byte a second: they held
    # every connection the server takes, for as long as they went on
    stop = threading.Event()
    socks = trickle(s, 70, stop)
    try:
        time.sleep(1)
        # one address holds 32 at most: another is served at once
        st, _, _ = get(s, "/api/session", src="127.0.0.2")
        check(st == 200, "served beside 70 slow connections (%s)" % st)
        # and a request not whole 10 s after its connection opened is cut,
        # however often a byte comes
        deadline = time.time() + GUARD
        while time.time() < deadline and not all(closed(c) for c in socks):
            time.sleep(0.5)
        check(all(closed(c) for c in socks),
              "every slow connection is closed by the server: %d of 70" %
              sum(closed(c) for c in socks))
    finally:
        stop.set()
        for c in socks:
            c.close()
    # once the server has seen them closed (on a loaded host not at once:
    # until then the address still holds its 32, and is refused)
    deadline = time.time() + GUARD
    st, _, _ = get(s, "/api/session")
    while st != 200 and time.time() < deadline:
        time.sleep(0.2)
        st, _, _ = get(s, "/api/session")
    check(st == 200, "then the slow address is served again (%s)" % st)


def event_streams(s, check):
    # 200 event streams that never read, from one address: 16 streams,
    # then 503, then refused; others are served, and stop is clean
    # (web_test.py's stop() wants exit 0)
    socks, codes = [], {}
    base = threads(s)
    for _ in range(200):
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.settimeout(GUARD)
        try:
            c.connect((s.host, s.port))
            c.sendall(("GET /api/events HTTP/1.1\r\nHost: %s:%d\r\n\r\n" %
                       (s.host, s.port)).encode())
        except OSError:
            pass
        socks.append(c)
    st, _, _ = get(s, "/api/session", src="127.0.0.3")
    check(st == 200, "served beside 200 event streams (%s)" % st)
    for c in socks:
        c.settimeout(5)
        try:
            k = parse(c.recv(64))[0]
        except OSError:
            k = None
        codes[k] = codes.get(k, 0) + 1
    check(codes.get(200, 0) <= 16 and codes.get(200, 0) + codes.get(503, 0)
          <= 32, "at most 16 streams, 32 connections from one address: %s" %
          codes)
    # one that goes away in the middle of the stream, without a FIN
    c = socket.create_connection((s.host, s.port), timeout=GUARD)
    c.sendall(("GET /api/events HTTP/1.1\r\nHost: %s:%d\r\n\r\n" %
               (s.host, s.port)).encode())
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                 b"\x01\x00\x00\x00\x00\x00\x00\x00")
    c.close()
    for c in socks:
        c.close()
    # their threads end (a stream notices at its next keep-alive)
    deadline = time.time() + GUARD
    while threads(s) > base + 2 and time.time() < deadline:
        time.sleep(0.5)
    check(threads(s) <= base + 2, "the streams' threads end: %d, %d before"
          % (threads(s), base))


def threads(s):
    with open("/proc/%d/status" % s.proc.pid) as f:
        return int([x for x in f if x.startswith("Threads:")][0].split()[1])


def figures(s, what):
    """ledger-web's RSS and threads, printed for the record."""
    print("web_attack: %s: RSS %d KiB, %d threads" %
          (what, rss_kb(s.proc.pid), threads(s)), flush=True)


def export_files(s):
    """The export files ledger-web holds open: unnamed, in its TMPDIR."""
    fd_dir = "/proc/%d/fd" % s.proc.pid
    out = []
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile
        if target.startswith(s.tmpdir + "/"):
            out.append(target)
    return out


def ask(s, path, src="127.0.0.1", rcvbuf=None):
    """A connection from @src that sent GET @path, and the head of its
    answer (read byte by byte, so the body stays in the socket)."""
    c = socket.socket()
    if rcvbuf:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    c.bind((src, 0))
    c.settimeout(GUARD)
    c.connect((s.host, s.port))
    c.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n"
               "\r\n" % (path, s.host, s.port)).encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        b = c.recv(1)
        if not b:
            break
        head += b
    return c, head


def header(head, name):
    m = re.search(rb"(?i)\r\n" + name.encode() + rb": ([^\r]*)", head)
    return m.group(1).decode() if m else None


def exports(s, check):
    # an export is a file of up to 64 MiB, and a thread: 64 at once took
    # 4 GiB of disk.  Now 4 at once, 2 from an address, a file each until
    # its download ends however it ends; more are refused at once
    path = "/api/runs/hostile-big/export"  # 6 MB: more than sockets hold
    held, stop = [], threading.Event()

    def slow_read():  # reading, a little at a time: never stalled
        while not stop.is_set():
            for c in list(held):
                try:
                    c.recv(4096)
                except OSError:
                    pass  # nothing there now
            stop.wait(0.05)
    reader = threading.Thread(target=slow_read, daemon=True)
    reader.start()
    try:
        for src in ["127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"]:
            c, head = ask(s, path, src, rcvbuf=4096)
            check(parse(head)[0] == 200, "export %d from %s: 200 (%s)" %
                  (len(held) + 1, src, head[:80]))
            c.setblocking(False)
            held.append(c)  # read from now on
        for src, why in [("127.0.0.1", "a third from one address"),
                         ("127.0.0.3", "a fifth in all")]:
            c, head = ask(s, path, src)
            body = b""
            while True:
                b = c.recv(65536)
                if not b:
                    break
                body += b
            c.close()
            check(parse(head)[0] == 503 and header(head, "Retry-After") and
                  header(head, "Content-Type") == "application/json" and
                  b'"busy"' in body, "%s: 503 busy with Retry-After (%s %s)"
                  % (why, head, body[:200]))
        files = export_files(s)
        check(len(files) == 4, "4 downloads, a file each in TMPDIR, none "
              "with a name: %s %s" % (files, os.listdir(s.tmpdir)))
        check(os.listdir(s.tmpdir) == [], "the files have no name: %s" %
              os.listdir(s.tmpdir))
        check(threads(s) <= 64 + 8, "threads bounded: %d" % threads(s))
        figures(s, "4 exports downloading")
    finally:
        stop.set()
        reader.join()
        for c in held:
            c.close()  # gone in the middle of their downloads
    deadline = time.time() + GUARD
    while export_files(s) and time.time() < deadline:
        time.sleep(0.2)
    check(export_files(s) == [] and os.listdir(s.tmpdir) == [],
          "the clients gone, their files are gone: %s %s" %
          (export_files(s), os.listdir(s.tmpdir)))
    st, ctype, body = get(s, "/api/runs/order-1/export")
    lines = body.decode().splitlines()
    check(st == 200 and json.loads(lines[0])["kind"] == "run" and
          len(lines) > 1, "then an export is served (%s %s)" %
          (st, body[:200]))
    check(export_files(s) == [], "and its file is gone once sent: %s" %
          export_files(s))


def held_export(s, check):
    """An export's download under way, not read: web_test.py stops the
    server with it."""
    c, head = ask(s, "/api/runs/hostile-big/export", rcvbuf=4096)
    check(parse(head)[0] == 200 and len(export_files(s)) == 1,
          "an export under way while the server stops (%s %s)" %
          (head[:80], export_files(s)))
    return c


def stream(s, check, rcvbuf=None):
    """A new event stream from 127.0.0.1, its answer's status seen (not
    taken): 200.  A 503 while a place is still held by a stream of an
    earlier case, whose client is gone (the server sees that at its next
    write to it, a keep-alive at most later), is asked again."""
    deadline = time.time() + GUARD
    while True:
        c = socket.socket()
        if rcvbuf:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        c.settimeout(GUARD)
        c.connect((s.host, s.port))
        c.sendall(("GET /api/events HTTP/1.1\r\nHost: %s:%d\r\n\r\n" %
                   (s.host, s.port)).encode())
        while (len(c.recv(12, socket.MSG_PEEK)) < 12 and
               time.time() < deadline):
            time.sleep(0.01)
        st = parse(c.recv(12, socket.MSG_PEEK))[0]
        if st != 503 or time.time() > deadline:
            check(st == 200, "an event stream: 200 (%s)" % st)
            return c
        c.close()
        time.sleep(0.5)


def stalled_streams(s, check):
    # an event stream whose client never reads held its place for ever
    # once its socket's buffers were full (the server's writes went on
    # into them).  Now one whose client took none of its bytes for the
    # stall bound (--stall-timeout 2 here) is reset; one that reads is not.
    # Every one of the 16 streams is seen taken (the reader's too), and the
    # 15 that will not read open with room for every event that may come
    # meanwhile (a loaded host takes long to open them, and any run's
    # change is an event), so none can stall before the 17th is refused;
    # only then is their room taken away, and the events that follow fill
    # their windows
    got, ended = bytearray(), []
    reader = stream(s, check)

    def read():
        while True:
            try:
                b = reader.recv(65536)
            except OSError as e:
                ended.append(repr(e))
                return
            if not b:
                ended.append("closed")
                return
            got.extend(b)
    t = threading.Thread(target=read, daemon=True)
    t.start()
    stuck, fresh, forks = [], [], []
    try:
        for _ in range(15):  # with the reader, the 16 streams there are
            c = stream(s, check, rcvbuf=1 << 20)
            stuck.append(c)
        c, head = ask(s, "/api/events", "127.0.0.4")
        c.close()
        check(parse(head)[0] == 503 and header(head, "Retry-After"),
              "the 16 streams taken: 503 with Retry-After (%s)" % head)
        for c in stuck:  # a byte of room: what comes next waits
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        # events (forks of a run: each a new run) until the windows of
        # the streams that do not read are full; then their places are
        # freed, one after another (the new ones, which do not read
        # either, with room for every event)
        deadline = time.time() + GUARD
        while len(fresh) < 15 and time.time() < deadline:
            c, head = ask(s, "/api/events", "127.0.0.4", rcvbuf=1 << 20)
            if parse(head)[0] == 200:
                fresh.append(c)
                continue
            c.close()
            forks.append("zz-stall-%d" % time.time_ns())
            st, _, out = post(s, "/api/runs/order-1/fork", body=json.dumps(
                {"at": "0:2", "new_id": forks[-1]}).encode())
            check(st == 200, "fork %s: %s %s" % (forks[-1], st, out[:200]))
            time.sleep(0.5)
        figures(s, "15 streams stalled, then 15 new")
        check(len(fresh) == 15, "the 15 streams not read are closed, and "
              "15 new ones taken: %d" % len(fresh))
        c, head = ask(s, "/api/events", "127.0.0.4")
        c.close()
        check(parse(head)[0] == 503, "the reader kept its place (%s)" % head)
        while (not all(("\"id\":\"%s\"" % f).encode() in got for f in forks)
               and time.time() < deadline and not ended):
            time.sleep(0.2)
        check(not ended, "the stream that reads is never cut: %s" % ended)
        ids = [int(x) for x in re.findall(rb"\nid: (\d+)\n", b"\n" + got)]
        check(all(("\"id\":\"%s\"" % f).encode() in got for f in forks) and
              ids and ids == list(range(ids[0], ids[0] + len(ids))) and
              b"event: reset" not in got,
              "it has every event, in order: %d of them, %s" %
              (len(ids), [f for f in forks
                          if ("\"id\":\"%s\"" % f).encode() not in got]))
        for c in stuck:  # reset by the server
            c.settimeout(GUARD)
            try:
                while c.recv(65536):
                    pass
                how = "closed"
            except ConnectionResetError:
                how = "reset"
            check(how == "reset", "a stream not read is reset: %s" % how)
    finally:
        reader.shutdown(socket.SHUT_RDWR)  # wakes its thread's recv()
        for c in stuck + fresh + [reader]:
            c.close()
        t.join()
