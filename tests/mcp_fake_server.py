#!/usr/bin/env python3
"""A small MCP server over stdio for tests/test_mcp.c: the cases the
reference servers do not show (an answer in pieces, a server request, a
misbehaving server).

    mcp_fake_server.py MODE DIR

Every line received is appended to DIR/log, and to DIR/log-PID, PID
this server's process id, which it appends to DIR/pids as it starts (so
a test tells two servers of one DIR apart).  MODE:
    ok          initialize; tools/list in two pages; tools "echo" (returns
                its arguments and the call's _meta as structuredContent),
                "fail" (isError with the text of arguments.text;
                with arguments.rpc, a JSON-RPC error of that code; with
                arguments.result, that object as its result; with
                arguments.surrogates, texts holding lone UTF-16
                surrogates, as a string cut inside a pair prints; with
                arguments.nul, a text holding a NUL, "\\u0000"), "slow"
                (never answers while DIR/hold exists), "asks" (sends the
                client a ping and a made-up request before answering),
                "die" (exits; with arguments.mute, closes its output and
                goes on reading)
    garbage     answers initialize and tools/list, then prints six lines
                that are not JSON-RPC (and a blank one) and never answers a
                call
    exit        exits at once
    silent      reads and never answers
    huge        as ok, but a call is answered with a 50 MB line
    badversion  answers initialize with an unknown protocol version
    oddname     as ok, with one tool more whose name JSON must escape
                (ODD), answering as "echo" does and with the name it got
    twice       as ok, but its tool list's second page names "echo" again
    patient     as ok, but "slow" answers once DIR/hold is gone, looking
                for it every 10 ms (meanwhile nothing else is read)
    hinted      as ok, "echo" annotated readOnlyHint true, "fail" false
    vDATE       as ok, answering initialize with protocol version DATE
    toolsobj    as ok, but tools/list answers its tools as an object by
                name, not an array
    schemaless  as ok, with one tool more ("loose") whose inputSchema is a
                string, no schema
    deaf        as ok, but once it has listed its tools it reads nothing
                more and never exits by itself
    slowrestart as ok, but a server started after the first one of DIR
                takes 2 s to start
    notools     as ok, but tools/list answers an empty list
    cursorloop  as ok, but tools/list pages in a loop: its cursors go
                "page2", "page3", "page2", ...
    objects     as ok, but a call is answered with three lines that are
                JSON objects and no JSON-RPC, and nothing more
    numcursor   as ok, but the first page of tools/list gives the cursor
                of the second as a number, 2
    relisthang  as ok, but "echo" says notifications/tools/list_changed
                before its answer, and tools/list is answered only until the
                first call
    longdesc    as ok, but the description of "die" is 5000 bytes long
"""
import json
import os
import sys
import time

mode, d = sys.argv[1], sys.argv[2]
log = open(os.path.join(d, "log"), "a")
if mode == "slowrestart" and os.path.exists(os.path.join(d, "pids")):
    time.sleep(2)
with open(os.path.join(d, "pids"), "a") as f:
    f.write("%d\n" % os.getpid())
own_log = open(os.path.join(d, "log-%d" % os.getpid()), "a")
if mode == "exit":
    sys.exit(3)


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def result(i, r):
    send({"jsonrpc": "2.0", "id": i, "result": r})


TOOLS = [
    {"name": "echo", "description": "Echo the arguments.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "fail", "description": "Fail with the given text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
    {"name": "slow", "description": "Answer once DIR/hold is gone.",
     "inputSchema": {"type": "object"}},
    {"name": "asks", "description": "Ask the client first.",
     "inputSchema": {"type": "object"}},
    {"name": "die", "description": "Exit.", "inputSchema": {"type": "object"}},
]
ODD = 'say "hi" \\ \u00e9/\u2713'
if mode == "hinted":
    TOOLS[0] = dict(TOOLS[0], annotations={"readOnlyHint": True})
    TOOLS[1] = dict(TOOLS[1], annotations={"readOnlyHint": False})
if mode == "unevaluated":  # a schema this library does not evaluate
    TOOLS.append({"name": "strict", "description": "Echo, strictly.",
                  "inputSchema": {"type": "object",
                                  "properties": {"text": {"type": "string"}},
                                  "unevaluatedProperties": False}})
if mode == "schemaless":
    TOOLS.append({"name": "loose", "description": "Echo, loosely.",
                  "inputSchema": "any object"})
if mode == "longdesc":  # a size no other allocation of the list has
    TOOLS[4] = dict(TOOLS[4], description="Exit. " + "x" * 4994)
if mode == "oddname":
    TOOLS.append({"name": ODD, "description": "Echo, with the name.",
                  "inputSchema": {"type": "object"}})

called = False
for line in sys.stdin:
    for f in (log, own_log):
        f.write(line)
        f.flush()
    if mode == "silent":
        continue
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    i, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if method is None or i is None:
        continue  # a notification or an answer
    if method == "initialize":
        v = ("1999-01-01" if mode == "badversion" else
             mode[1:] if mode.startswith("v2") else "2025-06-18")
        result(i, {"protocolVersion": v, "capabilities": {"tools": {}},
                   "serverInfo": {"name": "fake", "version": "1"}})
    elif method == "tools/list":
        if mode == "relisthang" and called:
            continue  # never answered once a call came
        if mode == "notools":
            result(i, {"tools": []})
        elif mode == "toolsobj":
            result(i, {"tools": {t["name"]: t for t in TOOLS}})
        elif mode == "cursorloop" and params.get("cursor") == "page2":
            result(i, {"tools": TOOLS[2:3], "nextCursor": "page3"})
        elif mode == "cursorloop" and params.get("cursor") == "page3":
            result(i, {"tools": TOOLS[3:], "nextCursor": "page2"})
        elif mode == "numcursor" and params.get("cursor") == 2:
            result(i, {"tools": TOOLS[2:]})
        elif mode == "numcursor":
            result(i, {"tools": TOOLS[:2], "nextCursor": 2})
        elif params.get("cursor") == "page2":
            result(i, {"tools": TOOLS[2:] + (TOOLS[:1] if mode == "twice"
                                             else [])})
        else:
            result(i, {"tools": TOOLS[:2], "nextCursor": "page2"})
        if mode == "deaf" and params.get("cursor") == "page2":
            while True:  # its input is read no more
                time.sleep(60)
    elif method == "tools/call":
        called = True
        if mode == "relisthang":
            send({"jsonrpc": "2.0",
                  "method": "notifications/tools/list_changed"})
        if mode == "garbage":
            sys.stdout.write("\r\n")  # a blank line is no garbage
            for k in range(5):
                sys.stdout.write("this is not JSON %d\n" % k)
            sys.stdout.write("[1, 2]\n")
            sys.stdout.flush()
            continue
        if mode == "objects":
            for k in range(3):
                send({"hello": k})
            continue
        if mode == "huge":
            sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {"content": '
                             '[{"type": "text", "text": "' % i)
            chunk = "x" * (1 << 20)
            for k in range(50):
                sys.stdout.write(chunk)
            sys.stdout.write('"}]}}\n')
            sys.stdout.flush()
            continue
        name, args = params.get("name"), params.get("arguments") or {}
        if name in ("echo", "strict", "loose") or (mode == "oddname" and name == ODD):
            result(i, {"content": [{"type": "text", "text": json.dumps(args)}],
                       "structuredContent": {"args": args, "name": name,
                                             "meta": params.get("_meta")}})
        elif name == "fail" and "surrogates" in args:
            result(i, {"content": [
                {"type": "text", "text": "cut \ud83d"},
                {"type": "text", "text": "\udc00 low, \\ud83d kept, "
                                         "pair \U0001F600"}]})
        elif name == "fail" and "nul" in args:
            result(i, {"content": [{"type": "text", "text": "ok\x00 rm -rf /"}]})
        elif name == "fail" and "result" in args:
            result(i, args["result"])
        elif name == "fail" and "rpc" in args:
            send({"jsonrpc": "2.0", "id": i,
                  "error": {"code": args["rpc"], "message": args.get("text")}})
        elif name == "fail":
            result(i, {"content": [{"type": "text", "text": args.get("text")}],
                       "isError": True})
        elif name == "slow":
            while mode == "patient" and os.path.exists(os.path.join(d, "hold")):
                time.sleep(0.01)
            if os.path.exists(os.path.join(d, "hold")):
                continue
            result(i, {"content": [{"type": "text", "text": "done"}]})
        elif name == "die" and args.get("mute"):
            os.close(1)  # alive, its input read, its output closed
            sys.stdout = open(os.devnull, "w")
        elif name == "die":
            sys.exit(0)
        elif name == "asks":
            send({"jsonrpc": "2.0", "id": "s1", "method": "ping"})
            send({"jsonrpc": "2.0", "id": "s2", "method": "sampling/createMessage",
                  "params": {}})
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "data": "hello"}})
            result(i, {"content": [{"type": "text", "text": "asked"}]})
        else:
            send({"jsonrpc": "2.0", "id": i,
                  "error": {"code": -32602, "message": "Unknown tool: %s" % name}})
    else:
        send({"jsonrpc": "2.0", "id": i,
              "error": {"code": -32601, "message": "Method not found"}})
