#!/usr/bin/env python3
"""A loopback HTTP server speaking a model provider's protocol (OpenAI chat
completions, Anthropic messages, Gemini generateContent, Ollama chat) from a
script of responses, for the LLM policy tests.  Standard library only.

  llm_server.py --script FILE --log FILE --port-file FILE

The script is {"protocol": P, "responses": [R, ...]}, P one of "openai"
(the default), "anthropic", "gemini", "ollama"; the n-th POST gets R[n]
(past the end, the script's "rest" response, else a 500).  With "by_turn":
true, a request gets R[t] instead, t the number of
assistant messages it carries: the same conversation, the same answer, as
a model that is asked again after a crash.  R is one of:
  {"status": 200, "body": {...}, "headers": {"Retry-After": "1"}}
  {"raw": "text", "status": 200}     a body that is not JSON
  {"hang": SECONDS}                   answer nothing for that long
  {"drop": true}                      close the connection, no response
  {"size": N}                         a 200 whose body is N bytes
  {"answer": {"text": T, "tool_calls": [C, ...]}, "usage": [IN, OUT]}
                                      a 200 in P's shape; C is {"id", "name",
                                      "arguments": a JSON value} ("id" is
                                      dropped for Gemini and Ollama, whose
                                      protocols have none), "tool": K
                                      instead of "name" takes the name of
                                      the K-th tool the request defined,
                                      "raw_arguments": TEXT sends OpenAI's
                                      arguments text as it is
  "retry_after_in": S                 (with any R) a Retry-After header
                                      holding the HTTP date S seconds after
                                      the request's whole second
A request for a stream ("stream": true in the body; Gemini's
streamGenerateContent) gets an "answer" as P's stream, chunked: OpenAI's
and Anthropic's server-sent events (usage included), Gemini's SSE, Ollama's
NDJSON; text and arguments are cut in pieces of "chunk" characters
(default 3) and Gemini's and Ollama's calls come whole.  More for streams:
  "cut_after": K                      close the connection after K events,
                                      the chunked body unfinished
  "stream_raw": TEXT                  send TEXT as the stream, as it is
  "flood": N                          text events without end, N bytes in
                                      all, then close
  "whole": true                       (with "answer") a whole JSON body all
                                      the same, as a server without streams
  "after_end": "drop" | "hang"        (with "answer") once the stream's last
                                      event is sent, close the connection
                                      with the chunked body unfinished, or
                                      keep it open, sending nothing more
Each request is logged before it is answered, one JSON line:
  {"n": index, "path": ..., "auth": "none"|"bearer"|"other",
   "auth_matches": bool (the key equals $PL_TEST_EXPECT_KEY),
   "x_api_key_matches": bool (so does the x-api-key header),
   "x_goog_api_key_matches": bool, "anthropic_version": header or null,
   "content_type": header or null,
   "t": seconds since the epoch, "tool_names": the names the body carries
   (definitions, calls, results), "bad_names": those P refuses,
   "sha256": the body's SHA-256 in hex, "bytes": its length,
   "body": {...}}
The key itself is never logged.  The port is written to --port-file once
the server listens.
"""
import argparse
import email.utils
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
state = {"n": 0}

# The tool names each protocol accepts.
NAME_RULES = {
    "openai": re.compile(r"[a-zA-Z0-9_-]{1,64}"),
    "anthropic": re.compile(r"[a-zA-Z0-9_-]{1,64}"),
    "ollama": re.compile(r"[a-zA-Z0-9_-]{1,64}"),
    "gemini": re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}"),
}


def items(v):
    return v if isinstance(v, list) else []


def tool_names(proto, body):
    """The tool names a request body carries: definitions first, in order,
    then those in messages (tool calls, results)."""
    defs, used = [], []
    if not isinstance(body, dict):
        return defs, used
    if proto == "gemini":
        for t in items(body.get("tools")):
            for d in items(t.get("functionDeclarations")):
                defs.append(d.get("name"))
        for c in items(body.get("contents")):
            for p in items(c.get("parts")):
                for k in ("functionCall", "functionResponse"):
                    if isinstance(p.get(k), dict):
                        used.append(p[k].get("name"))
    elif proto == "anthropic":
        defs = [t.get("name") for t in items(body.get("tools"))]
        for m in items(body.get("messages")):
            for b in items(m.get("content")):
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    used.append(b.get("name"))
    else:
        defs = [t.get("function", {}).get("name")
                for t in items(body.get("tools"))]
        for m in items(body.get("messages")):
            for c in items(m.get("tool_calls")):
                used.append(c.get("function", {}).get("name"))
            if "tool_name" in m:
                used.append(m["tool_name"])
    return defs, used


def turn_of(proto, body):
    """How many times the model has spoken in this conversation."""
    if not isinstance(body, dict):
        return 0
    if proto == "gemini":
        return sum(1 for c in items(body.get("contents"))
                   if isinstance(c, dict) and c.get("role") == "model")
    return sum(1 for m in items(body.get("messages"))
               if isinstance(m, dict) and m.get("role") == "assistant")


def calls_of(answer, defs):
    """The answer's tool calls, "tool": K resolved to a name."""
    calls = []
    for c in answer.get("tool_calls", []):
        c = dict(c)
        if "tool" in c:
            k = c.pop("tool")
            c["name"] = defs[k] if k < len(defs) else "no-such-tool"
        calls.append(c)
    return calls


def render(proto, answer, usage, defs):
    """A neutral answer as a response body of the protocol."""
    text, calls = answer.get("text"), calls_of(answer, defs)
    n_in, n_out = usage
    if proto == "anthropic":
        content = [{"type": "text", "text": text}] if text is not None else []
        for c in calls:
            content.append({"type": "tool_use", "id": c.get("id"),
                            "name": c["name"], "input": c.get("arguments")})
        return {"type": "message", "role": "assistant", "content": content,
                "stop_reason": "tool_use" if calls else "end_turn",
                "usage": {"input_tokens": n_in, "output_tokens": n_out}}
    if proto == "gemini":
        parts = [{"text": text}] if text is not None else []
        for c in calls:
            parts.append({"functionCall": {"name": c["name"],
                                           "args": c.get("arguments")}})
        return {"candidates": [{"content": {"role": "model",
                                            "parts": parts},
                                "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": n_in,
                                  "candidatesTokenCount": n_out}}
    if proto == "ollama":
        msg = {"role": "assistant", "content": text or ""}
        if calls:
            msg["tool_calls"] = [{"function": {"name": c["name"],
                                               "arguments":
                                                   c.get("arguments")}}
                                 for c in calls]
        return {"model": "m", "message": msg, "done": True,
                "prompt_eval_count": n_in, "eval_count": n_out}
    msg = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c["name"],
                          "arguments": c["raw_arguments"]
                          if "raw_arguments" in c
                          else json.dumps(c.get("arguments"))}}
            for c in calls]
    return {"choices": [{"message": msg, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out}}


def pieces(text, n):
    return [text[i:i + n] for i in range(0, len(text), n)] if text else []


def stream_events(proto, answer, usage, defs, n):
    """A neutral answer as a list of stream events (bytes) of the
    protocol."""
    text, calls = answer.get("text"), calls_of(answer, defs)
    n_in, n_out = usage
    out = []

    def sse(obj, event=None):
        head = "event: %s\n" % event if event else ""
        out.append((head + "data: " + json.dumps(obj) + "\n\n").encode())

    if proto == "anthropic":
        sse({"type": "message_start", "message": {
            "type": "message", "role": "assistant", "content": [],
            "usage": {"input_tokens": n_in, "output_tokens": 1}}},
            "message_start")
        b = 0
        if text is not None:
            sse({"type": "content_block_start", "index": b,
                 "content_block": {"type": "text", "text": ""}},
                "content_block_start")
            out.append(b"event: ping\ndata: {\"type\": \"ping\"}\n\n")
            for p in pieces(text, n):
                sse({"type": "content_block_delta", "index": b,
                     "delta": {"type": "text_delta", "text": p}},
                    "content_block_delta")
            sse({"type": "content_block_stop", "index": b},
                "content_block_stop")
            b += 1
        for c in calls:
            sse({"type": "content_block_start", "index": b,
                 "content_block": {"type": "tool_use", "id": c.get("id"),
                                   "name": c["name"], "input": {}}},
                "content_block_start")
            for p in pieces(json.dumps(c.get("arguments")), n):
                sse({"type": "content_block_delta", "index": b,
                     "delta": {"type": "input_json_delta",
                               "partial_json": p}}, "content_block_delta")
            sse({"type": "content_block_stop", "index": b},
                "content_block_stop")
            b += 1
        sse({"type": "message_delta",
             "delta": {"stop_reason": "tool_use" if calls else "end_turn"},
             "usage": {"output_tokens": n_out}}, "message_delta")
        sse({"type": "message_stop"}, "message_stop")
    elif proto == "gemini":
        meta = {"promptTokenCount": n_in, "candidatesTokenCount": 0}
        for p in pieces(text, n):
            sse({"candidates": [{"content": {"role": "model",
                                             "parts": [{"text": p}]}}],
                 "usageMetadata": meta})
        for c in calls:
            sse({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": c["name"],
                                  "args": c.get("arguments")}}]}}],
                 "usageMetadata": meta})
        sse({"candidates": [{"content": {"role": "model", "parts": []},
                             "finishReason": "STOP"}],
             "usageMetadata": {"promptTokenCount": n_in,
                               "candidatesTokenCount": n_out}})
    elif proto == "ollama":
        def line(obj):
            out.append((json.dumps(obj) + "\n").encode())
        for p in pieces(text, n):
            line({"model": "m", "message": {"role": "assistant",
                                            "content": p}, "done": False})
        if calls:
            line({"model": "m", "message": {
                "role": "assistant", "content": "",
                "tool_calls": [{"function": {"name": c["name"],
                                             "arguments":
                                                 c.get("arguments")}}
                               for c in calls]}, "done": False})
        line({"model": "m", "message": {"role": "assistant", "content": ""},
              "done": True, "prompt_eval_count": n_in, "eval_count": n_out})
    else:
        sse({"choices": [{"index": 0, "delta": {"role": "assistant",
                                                "content": ""}}]})
        for p in pieces(text, n):
            sse({"choices": [{"index": 0, "delta": {"content": p}}]})
        for k, c in enumerate(calls):
            args = c["raw_arguments"] if "raw_arguments" in c \
                else json.dumps(c.get("arguments"))
            sse({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": k, "id": c.get("id"), "type": "function",
                 "function": {"name": c["name"], "arguments": ""}}]}}]})
            for p in pieces(args, n):
                sse({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": k, "function": {"arguments": p}}]}}]})
        sse({"choices": [{"index": 0, "delta": {},
                          "finish_reason": "tool_calls" if calls
                          else "stop"}]})
        sse({"choices": [], "usage": {"prompt_tokens": n_in,
                                      "completion_tokens": n_out}})
        out.append(b"data: [DONE]\n\n")
    return out


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
    proto = script.get("protocol", "openai")
    rule = NAME_RULES[proto]
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
            now = time.time()
            turn = turn_of(proto, body)
            defs, used = tool_names(proto, body)
            bad = [x for x in defs + used
                   if not isinstance(x, str) or not rule.fullmatch(x)]
            xkey = self.headers.get("x-api-key")
            gkey = self.headers.get("x-goog-api-key")
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
                                          "x_goog_api_key_matches":
                                              gkey is not None
                                              and gkey == expect,
                                          "anthropic_version": version,
                                          "content_type": self.headers.get(
                                              "Content-Type"),
                                          "t": now,
                                          "tool_names": defs + used,
                                          "bad_names": bad,
                                          "sha256":
                                              hashlib.sha256(raw).hexdigest(),
                                          "bytes": len(raw),
                                          "body": body}) + "\n")
            i = turn if by_turn else n
            r = responses[i] if i < len(responses) else script.get("rest", {
                "status": 500, "body": {"error": {"message": "script ended"}}})
            if "hang" in r:
                time.sleep(r["hang"])
                self.close_connection = True
                return
            if r.get("drop"):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            streamed = (isinstance(body, dict) and body.get("stream") is True
                        ) or "streamGenerateContent" in self.path
            if streamed and not r.get("whole") and (
                    "answer" in r or "stream_raw" in r
                             or "flood" in r):
                self.send_stream(r, defs)
                return
            if "size" in r:
                data = b"x" * r["size"]
            elif "raw" in r:
                data = r["raw"].encode()
            elif "answer" in r:
                data = json.dumps(render(proto, r["answer"],
                                         r.get("usage", [0, 0]),
                                         defs)).encode()
            else:
                data = json.dumps(r.get("body", {})).encode()
            self.send_response(r.get("status", 200))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in r.get("headers", {}).items():
                self.send_header(k, v)
            if "retry_after_in" in r:
                self.send_header("Retry-After", email.utils.formatdate(
                    int(now) + r["retry_after_in"], usegmt=True))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def send_stream(self, r, defs):
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson"
                             if proto == "ollama" else "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if "stream_raw" in r:
                    self.chunk(r["stream_raw"].encode())
                elif "flood" in r:
                    ev = ("data: " + json.dumps({"choices": [{"index": 0,
                          "delta": {"content": "x" * 4000}}]}) +
                          "\n\n").encode()
                    sent = 0
                    while sent < r["flood"]:
                        self.chunk(ev)
                        sent += len(ev)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                else:
                    events = stream_events(proto, r["answer"],
                                           r.get("usage", [0, 0]), defs,
                                           r.get("chunk", 3))
                    cut = r.get("cut_after")
                    for k, ev in enumerate(events):
                        if cut is not None and k == cut:
                            self.close_connection = True
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        self.chunk(ev)
                    if r.get("after_end") == "hang":
                        time.sleep(3600)
                    if r.get("after_end") == "drop":
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

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
