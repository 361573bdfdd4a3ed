#!/usr/bin/env python3
"""A wrapper around a real MCP server over stdio that changes its tool
list on request, for tests/test_mcp_tools.c.

    mcp_alter.py DIR COMMAND ARG...

Every line the client sends is appended to DIR/log and passed to the
server; every line of the server is appended to DIR/out.log and passes
back, except that, while the file
DIR/altered exists, a tools/list answer is changed as its lines say, each
"TOOL description" (" (changed)" after the tool's description, and a
property "changed" in its inputSchema), "TOOL title" (" (changed)" after
its title: what a model is shown stays the same) or "TOOL gone" (the tool
is left out).  Creating DIR/announce makes the wrapper send the client
notifications/tools/list_changed (within about 10 ms) and remove the file.
"""
import json
import os
import subprocess
import sys
import threading
import time

d, cmd = sys.argv[1], sys.argv[2:]
log = open(os.path.join(d, "log"), "a")
out_log = open(os.path.join(d, "out.log"), "a")
server = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
out = threading.Lock()
lists = set()  # ids of the client's tools/list requests


def send(line):
    with out:
        sys.stdout.write(line)
        sys.stdout.flush()


def alter(msg):
    try:
        changes = [l.split() for l in open(os.path.join(d, "altered"))]
    except OSError:
        return msg
    tools = msg["result"]["tools"]
    for name, what in (c for c in changes if len(c) == 2):
        for t in tools:
            if t.get("name") != name:
                continue
            if what == "description":
                t["description"] = (t.get("description") or "") + " (changed)"
                t.setdefault("inputSchema", {}).setdefault("properties", {})[
                    "changed"] = {"type": "boolean"}
            elif what == "title":
                t["title"] = (t.get("title") or "") + " (changed)"
        if what == "gone":
            tools = [t for t in tools if t.get("name") != name]
    msg["result"]["tools"] = tools
    return msg


def from_server():
    for line in server.stdout:
        line = line.decode()
        out_log.write(line)
        out_log.flush()
        try:
            msg = json.loads(line)
        except ValueError:
            send(line)
            continue
        if isinstance(msg, dict) and msg.get("id") in lists and "result" in msg:
            line = json.dumps(alter(msg)) + "\n"
        send(line)
    os._exit(0)


def announce():
    path = os.path.join(d, "announce")
    while True:
        if os.path.exists(path):
            send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}\n')
            os.remove(path)
        time.sleep(0.01)


threading.Thread(target=from_server, daemon=True).start()
threading.Thread(target=announce, daemon=True).start()
for line in sys.stdin:
    log.write(line)
    log.flush()
    try:
        msg = json.loads(line)
        if isinstance(msg, dict) and msg.get("method") == "tools/list":
            lists.add(msg.get("id"))
    except ValueError:
        pass
    server.stdin.write(line.encode())
    server.stdin.flush()
server.stdin.close()
server.wait()
