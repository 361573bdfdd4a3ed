#!/usr/bin/env python3
"""A scripted MCP server over Streamable HTTP, for tests/test_mcp_http.c:
a server that answers as the spec says until its script tells it to
misbehave.  Standard library only; raw sockets, so that a status line or a
header can be anything.

    mcp_http_server.py --script FILE --log FILE --port-file FILE [--host H]

Every POST is logged before it is answered, one JSON line:
    {"n": index, "method": M, "id": ID, "session": the Mcp-Session-Id sent
     or null, "auth": whether an Authorization header came,
     "auth_ok": whether it is "Bearer $PL_TEST_MCP_TOKEN",
     "accept_encoding": the header or null,
     "protocol_version": the MCP-Protocol-Version header or null}
(the token itself is never logged).  As the spec has it: initialize is
answered with a new session id "s-N"; a request whose session id is not
one given (or was expired) is answered 404; notifications 202; tools/list
lists the tool "echo"; tools/call of echo returns its arguments as text;
DELETE ends the session (logged as the method "DELETE").

The script is {"init": [R...], "list": [R...], "call": [R...],
"notify": [R...], "delete": [R...]}: the n-th initialize, tools/list,
tools/call, notification, DELETE gets R[n] instead (past the end, or null,
the normal answer; a notification takes only "status" and "expire", a
DELETE only "status": e.g. 405, a server that lets no client end its
sessions, which then go on).  Once a session was
given, a request with none is answered 400.  With "require_token": true
in the script, a POST without "Authorization: Bearer $PL_TEST_MCP_TOKEN"
is answered 401, as a server that wants its token does (and logged all
the same).  R is an object:
    "status": N, "reason": TEXT     the status line (default 200 OK)
    "headers": [[NAME, VALUE]...]   more headers, sent as they are (a VALUE
                                    may hold CR, LF or NUL)
    "session": TEXT or null         the Mcp-Session-Id header instead of
                                    the usual one (initialize's); null: none
    "session_bytes": N              ... N bytes of "a"
    "body": TEXT                    this body instead of the answer
    "sse": true                     the answer as an event stream
    "list_changed": true            (with "sse") notifications/tools/
                                    list_changed before the answer
    "content_type": TEXT            that Content-Type instead
    "gzip": true                    gzip the body when the request asks
    "gzip_bomb": N                  a gzip body of N zero bytes, unasked
    "forever": true                 an event stream of comments, never
                                    the answer, until the client leaves
    "answer_first": true            (with "forever") the answer's event
                                    first, then the comments
    "drip": true                    a JSON body one byte every 20 ms, never
                                    ending
    "header_flood": N               N bytes of extra header lines
    "interim": [N...]               1xx responses sent first
    "expire": true                  every session ends (before answering)
The port is written to --port-file once the server listens.
"""
import argparse
import gzip
import json
import os
import socket
import threading
import time
import zlib

lock = threading.Lock()
state = {"n": 0, "sessions": set(), "next": 0,
         "count": {"init": 0, "list": 0, "call": 0, "notify": 0,
                   "delete": 0}}
TOOLS = [{"name": "echo", "description": "Echo the arguments.",
          "inputSchema": {"type": "object"}}]
SCRIPT_KEY = {"initialize": "init", "tools/list": "list",
              "tools/call": "call"}


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method = lines[0].split(" ")[0]
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    need = int(headers.get("content-length", "0"))
    while len(rest) < need:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return method, headers, rest[:need]


def send_all(conn, b):
    try:
        conn.sendall(b)
        return True
    except OSError:
        return False


def respond(conn, status, headers, body, reason=None):
    out = "HTTP/1.1 %d %s\r\n" % (status, reason or "OK")
    for k, v in headers:
        out += "%s: %s\r\n" % (k, v)
    out += "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    send_all(conn, out.encode("latin-1") + body)


def answer_of(msg):
    i, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if method == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "scripted", "version": "1"}}
    elif method == "tools/list":
        r = {"tools": TOOLS}
    elif method == "tools/call":
        r = {"content": [{"type": "text",
                          "text": json.dumps(params.get("arguments"))}]}
    else:
        return {"jsonrpc": "2.0", "id": i,
                "error": {"code": -32601, "message": "Method not found"}}
    return {"jsonrpc": "2.0", "id": i, "result": r}


def handle(conn, script, log_path, token):
    req = read_request(conn)
    if req is None:
        return
    verb, h, body = req
    sid = h.get("mcp-session-id")
    if verb == "DELETE":
        auth = h.get("authorization")
        with lock:
            k = state["count"]["delete"]
            state["count"]["delete"] += 1
            rs = script.get("delete") or []
            r = (rs[k] if k < len(rs) else None) or {}
            status = r.get("status", 200)
            if status == 200:
                state["sessions"].discard(sid)
            n = state["n"]
            state["n"] += 1
        with open(log_path, "a") as f:
            f.write(json.dumps({
                "n": n, "method": "DELETE", "id": None, "session": sid,
                "auth": auth is not None,
                "auth_ok": auth == "Bearer %s" % token if token else False,
                "accept_encoding": h.get("accept-encoding"),
                "protocol_version": h.get("mcp-protocol-version")}) + "\n")
        if status == 200:
            respond(conn, 200, [], b"")
        else:
            respond(conn, status, [("Allow", "GET, POST"),
                                   ("Content-Type", "application/json")],
                    json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                        "code": -32000, "message": "Method not allowed: "
                        "sessions end at the server's will"}}).encode(),
                    "Method Not Allowed")
        return
    try:
        msg = json.loads(body)
    except ValueError:
        msg = {}
    method, i = msg.get("method"), msg.get("id")
    auth = h.get("authorization")
    with lock:
        n = state["n"]
        state["n"] += 1
        r = None
        key = SCRIPT_KEY.get(method) or (
            "notify" if str(method).startswith("notifications/") else None)
        if key:
            k = state["count"][key]
            state["count"][key] += 1
            rs = script.get(key) or []
            r = rs[k] if k < len(rs) else None
        if r and r.get("expire"):
            state["sessions"].clear()
        known = sid in state["sessions"]
        issued = state["next"] > 0
        if method == "initialize" and not (r and "session" in r):
            state["next"] += 1
            new_sid = "s-%d" % state["next"]
            state["sessions"].add(new_sid)
        else:
            new_sid = None
    with open(log_path, "a") as f:
        f.write(json.dumps({
            "n": n, "method": method, "id": i, "session": sid,
            "auth": auth is not None,
            "auth_ok": auth == "Bearer %s" % token if token else False,
            "accept_encoding": h.get("accept-encoding"),
            "protocol_version": h.get("mcp-protocol-version")}) + "\n")
    if script.get("require_token") and auth != "Bearer %s" % token:
        respond(conn, 401, [("WWW-Authenticate", "Bearer"),
                            ("Content-Type", "application/json")],
                b'{"error": "invalid_token"}', "Unauthorized")
        return
    if sid is not None and not known and method != "initialize":
        err = {"jsonrpc": "2.0", "id": None,
               "error": {"code": -32001, "message": "Session not found"}}
        respond(conn, 404, [("Content-Type", "application/json")],
                json.dumps(err).encode(), "Not Found")
        return
    if sid is None and issued and method != "initialize":
        err = {"jsonrpc": "2.0", "id": None,
               "error": {"code": -32000,
                         "message": "Bad Request: No valid session ID"}}
        respond(conn, 400, [("Content-Type", "application/json")],
                json.dumps(err).encode(), "Bad Request")
        return
    if i is None:
        if r and r.get("status"):
            respond(conn, r["status"], [], b"")
        else:
            respond(conn, 202, [], b"", "Accepted")
        return
    r = r or {}
    for s in r.get("interim", []):
        send_all(conn, ("HTTP/1.1 %d Interim\r\n\r\n" % s).encode())
    headers = [(k, v) for k, v in r.get("headers", [])]
    if "session_bytes" in r:
        headers.append(("Mcp-Session-Id", "a" * r["session_bytes"]))
    elif "session" in r:
        if r["session"] is not None:
            headers.append(("Mcp-Session-Id", r["session"]))
    elif new_sid:
        headers.append(("Mcp-Session-Id", new_sid))
    status, reason = r.get("status", 200), r.get("reason")
    answer = json.dumps(answer_of(msg))
    ctype = "application/json"
    if r.get("sse"):
        ctype = "text/event-stream"
        payload = ("event: message\ndata: %s\n\n" % answer).encode()
        if r.get("list_changed"):
            payload = (b'event: message\ndata: {"jsonrpc": "2.0", "method": '
                       b'"notifications/tools/list_changed"}\n\n' + payload)
    else:
        payload = answer.encode()
    if "body" in r:
        payload = r["body"].encode("latin-1")
    ctype = r.get("content_type", ctype)
    if ctype is not None:
        headers.append(("Content-Type", ctype))
    if r.get("gzip") and "gzip" in (h.get("accept-encoding") or ""):
        payload = gzip.compress(payload)
        headers.append(("Content-Encoding", "gzip"))
    if "gzip_bomb" in r:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        block, left, parts = bytes(1 << 20), r["gzip_bomb"], []
        while left > 0:
            parts.append(z.compress(block[:min(left, len(block))]))
            left -= len(block)
        parts.append(z.flush())
        payload = b"".join(parts)
        headers.append(("Content-Encoding", "gzip"))
    if "header_flood" in r:
        line, left, k = "X-Pad-%d: " + "p" * 1000 + "\r\n", r["header_flood"], 0
        head = "HTTP/1.1 %d OK\r\n" % status
        if not send_all(conn, head.encode()):
            return
        while left > 0:
            if not send_all(conn, (line % k).encode()):
                return
            left -= 1010
            k += 1
        respond_rest = "".join("%s: %s\r\n" % kv for kv in headers)
        send_all(conn, (respond_rest + "Content-Length: %d\r\n\r\n"
                        % len(payload)).encode("latin-1") + payload)
        return
    if r.get("forever") or r.get("drip"):
        head = "HTTP/1.1 200 OK\r\n" + "".join(
            "%s: %s\r\n" % kv for kv in headers) + "\r\n"
        if not send_all(conn, head.encode("latin-1")):
            return
        if r.get("answer_first") and not send_all(conn, payload):
            return
        while True:
            time.sleep(0.02)
            if not send_all(conn, b": keep-alive\n\n" if r.get("forever")
                            else b" "):
                return
    respond(conn, status, headers, payload, reason)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    a = ap.parse_args()
    with open(a.script) as f:
        script = json.load(f)
    token = os.environ.get("PL_TEST_MCP_TOKEN")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a.host, 0))
    s.listen(16)
    open(a.log, "a").close()
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % s.getsockname()[1])
    os.rename(tmp, a.port_file)

    def serve(conn):
        try:
            handle(conn, script, a.log, token)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
