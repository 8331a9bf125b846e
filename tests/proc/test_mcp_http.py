"""MCP servers over the streamable HTTP transport (docs/tools.md "MCP servers"): an [mcp.NAME] section with a url,
against the real @modelcontextprotocol/server-everything from npm serving `streamableHttp` on a loopback port.
The worker runs agentd-mcp-http, which speaks stdio to it and HTTP to the server: the tools offered, calls and
their results, one session for every call, a server that cannot be reached (a clear error result), a server
restarted without its sessions (the call that meets it fails saying so, the next one opens a new session), and
the configurations refused."""
import json
import os
import socket
import subprocess

import harness
from harness import Agentd, wait_for

SERVER = harness.REPO / "tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what, log=None):
    """Until something accepts connections on port (proc, which must not exit meanwhile)."""
    def listening():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            assert proc.poll() is None, f"{what} exited: " + (open(log).read() if log else "")
            return False
    wait_for(listening, 60, f"{what} listening")


class HttpServer:
    """server-everything's streamable HTTP server on port, its output in log."""

    def __init__(self, port, log):
        self.port, self.log = port, log
        self.proc = None

    def start(self):
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(["node", str(SERVER), "streamableHttp"], stdout=out, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, PORT=str(self.port)), start_new_session=True)
        out.close()

        wait_listening(self.port, self.proc, "server-everything", self.log)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def sessions(self):
        with open(self.log) as f:
            return f.read().count("Session initialized with ID")


def call(a, c, tool, args=None, timeout=60):
    return harness.call_tool(a, c, tool, args, timeout)


def test_calls_over_streamable_http():
    with Agentd(start=False) as a:
        srv = HttpServer(free_port(), os.path.join(a.dir, "server.log"))
        dead = free_port()  # nobody listens there
        a.write_config(f"""
[mcp.web]
url = http://127.0.0.1:{srv.port}/mcp
idempotent = yes
[mcp.gone]
url = http://127.0.0.1:{dead}/mcp
start_timeout = 5s
""")
        srv.start()
        try:
            a.start()
            c = a.create(settings={"model": "echo", "tools": ["web", "gone"]})
            r = call(a, c, "web__get-sum", {"a": 2, "b": 40})
            assert r["status"] == "resolved" and r["result"] == {"text": "The sum of 2 and 40 is 42."}, r
            r = call(a, c, "web__get-structured-content", {"location": "New York"})
            assert r["status"] == "resolved", r
            assert set(r["result"]["structuredContent"]) == {"temperature", "conditions", "humidity"}, r
            r = call(a, c, "web__echo", {})
            assert r["status"] == "errored", r
            assert r["result"]["error"].startswith("MCP error -32602: Input validation error"), r
            r = call(a, c, "web__no-such-tool", {})
            assert r["status"] == "errored" and "Tool no-such-tool not found" in r["result"]["error"], r
            # Resources, as two tools of the server's.
            r = call(a, c, "web__list_resources")
            assert r["status"] == "resolved" and r["result"]["resources"], r
            first = r["result"]["resources"][0]
            assert {"uri", "name"} <= set(first), first
            r = call(a, c, "web__read_resource", {"uri": first["uri"]})
            assert r["status"] == "resolved", r
            assert r["result"]["contents"] and r["result"]["contents"][0]["uri"] == first["uri"], r
            assert ("text" in r["result"]) == any("text" in x for x in r["result"]["contents"]), r
            r = call(a, c, "web__read_resource", {"uri": "nope://x"})
            assert r["status"] == "errored" and r["result"]["error"].startswith("MCP error"), r
            # One session for all of them: one initialize, every later request carried its id.
            assert srv.sessions() == 1, open(srv.log).read()
            assert a.log().count("mcp web: started") == 1, a.log_tail()
            # A server nobody listens on: a clear error result, the conversation goes on.
            r = call(a, c, "gone__anything")
            assert r["status"] == "errored", r
            assert "MCP server gone" in r["result"]["error"] and "could not be reached" in r["result"]["error"], r
            # The server restarted without its sessions: the call that meets it fails saying so...
            srv.stop()
            srv.start()
            r = call(a, c, "web__get-sum", {"a": 1, "b": 1})
            assert r["status"] == "errored" and "does not know the session" in r["result"]["error"], r
            # ... and the next one opens a new session.
            r = call(a, c, "web__get-sum", {"a": 1, "b": 2})
            assert r["status"] == "resolved" and r["result"] == {"text": "The sum of 1 and 2 is 3."}, r
            assert srv.sessions() == 2, open(srv.log).read()
            wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 30, "idle")
            results = a.events(c, type="tool_result")
            assert len(results) == 10, results  # each call settled once
        finally:
            srv.stop()


# A streamable HTTP server of our own, for what server-everything does not show: the headers each request
# carried (argv[2]: one JSON line per request), a JSON answer (tools/list) beside an event stream (tools/call,
# a notification before its response), 202 for notifications, and a session id on every request after
# initialize.
FAKE = r'''
import http.server, json, sys
port, log = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open(log, "a") as f:
            f.write(json.dumps({"method": msg.get("method"), "headers": dict(self.headers)}) + "\n")
        if "id" not in msg:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        m, rid = msg["method"], msg["id"]
        if m == "server/discover":  # as a 2025 SDK server answers a request outside a session
            out = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000,
                              "message": "Bad Request: Server not initialized"}}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        if m == "initialize":
            body = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}
        elif m == "tools/list":
            body = {"tools": [{"name": "whoami", "description": "Says who asked.", "inputSchema": {"type": "object"}},
                              {"name": "flaky", "description": "Cut once.", "inputSchema": {"type": "object"}},
                              {"name": "broken", "inputSchema": {"type": "object"}},
                              {"name": "silent", "inputSchema": {"type": "object"}}]}
        elif msg["params"]["name"] in ("broken", "silent"):  # an HTTP error; a 200 without a response
            out = b"upstream\nfailed" if msg["params"]["name"] == "broken" else b""
            self.send_response(500 if out else 200)
            self.send_header("Content-Type", "text/plain" if out else "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        elif msg["params"]["name"] == "flaky":  # an event with an id, then the connection cut mid-body
            ev = ("id: e1\ndata: " + json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "data": "half way"}}) + "\n\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(ev) + 1000))
            self.end_headers()
            self.wfile.write(ev)
            self.wfile.flush()
            self.close_connection = True
            pending[msg["id"]] = True
            return
        else:
            text = self.headers.get("Authorization", "") + " " + self.headers.get("X-Tenant", "")
            out = ("event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "data": "working"}}) + "\n\n" +
                   "data: " + json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})
                   + "\n\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        out = json.dumps({"jsonrpc": "2.0", "id": rid, "result": body}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if m == "initialize":
            self.send_header("Mcp-Session-Id", "sess-1")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_GET(self):  # the resumption of flaky's stream: what it missed after e1
        with open(log, "a") as f:
            f.write(json.dumps({"method": "GET", "headers": dict(self.headers)}) + "\n")
        rid = next(iter(pending))
        out = ("id: e2\ndata: " + json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [
               {"type": "text", "text": "resumed after " + self.headers.get("Last-Event-ID", "")}]}}) + "\n\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
pending = {}
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_headers_session_and_event_streams():
    long = "L" * 3000  # a header over any fixed buffer: a JWT can be kilobytes
    with Agentd(start=False, env=dict(os.environ, FAKE_TOKEN="t0ken", FAKE_LONG=long)) as a:
        port, log = free_port(), os.path.join(a.dir, "requests.jsonl")
        fake = subprocess.Popen(["python3", a.script("fake_mcp.py", FAKE), str(port), log], start_new_session=True)
        try:
            wait_listening(port, fake, "the recording server")
            a.write_config(f"""
[mcp.f]
url = http://127.0.0.1:{port}/mcp
headers = "Authorization: Bearer $FAKE_TOKEN" "X-Tenant: acme" "X-Long: $FAKE_LONG"
""")
            a.start()
            c = a.create(settings={"model": "echo", "tools": ["f"]})
            r = call(a, c, "f__whoami")
            assert r["status"] == "resolved" and r["result"] == {"text": "Bearer t0ken acme"}, r
            # A stream cut before its response is resumed with Last-Event-ID: the call gets its answer.
            r = call(a, c, "f__flaky")
            assert r["status"] == "resolved" and r["result"] == {"text": "resumed after e1"}, r
            with open(log) as f:
                reqs = [json.loads(line) for line in f]
            # server/discover first (refused: a 2025 server), then the 2025 handshake.
            assert [q["method"] for q in reqs] == ["server/discover", "initialize", "notifications/initialized",
                                                   "tools/list", "tools/call", "tools/call", "GET"], \
                [q["method"] for q in reqs]
            # An HTTP error and a 200 without a response each answer the call with what happened.
            r = call(a, c, "f__broken")
            assert r["status"] == "errored", r
            assert r["result"]["error"] == "MCP error -32000: the MCP server answered HTTP 500: upstream failed", r
            r = call(a, c, "f__silent")
            assert r["status"] == "errored", r
            assert r["result"]["error"] == "MCP error -32000: the MCP server sent no response", r
            assert {k.lower(): v for k, v in reqs[-1]["headers"].items()}["last-event-id"] == "e1", reqs[-1]
            for q in reqs:
                h = {k.lower(): v for k, v in q["headers"].items()}
                assert h["accept"] == "application/json, text/event-stream", q
                assert h["authorization"] == "Bearer t0ken" and h["x-tenant"] == "acme", q
                assert h["x-long"] == long, len(h.get("x-long", ""))
                if q["method"] == "server/discover":
                    assert h["mcp-protocol-version"] == "2026-07-28" and h["mcp-method"] == "server/discover", h
                    assert "mcp-session-id" not in h, h
                elif q["method"] != "initialize":  # the session and version initialize gave
                    assert h["mcp-session-id"] == "sess-1" and h["mcp-protocol-version"] == "2025-06-18", q
                    assert "mcp-method" not in h, h
                else:
                    assert "mcp-session-id" not in h, q
        finally:
            fake.kill()
            fake.wait()


# A server of revision 2026-07-28 (stateless): no initialize (answered 404 with -32601, as an unknown
# method), every request checked as that revision wants it (MCP-Protocol-Version, Mcp-Method and Mcp-Name
# agreeing with the body's _meta and params; else 400 with -32020), no session. Its tools: `hello` (an event
# stream), `ask` (a result that asks for input), `slow` (answers after 3 s, and notes whether the stream was
# still open). Each request is logged (argv[2]) with its method, headers and _meta.
MODERN = r'''
import http.server, json, sys, time
port, log = int(sys.argv[1]), sys.argv[2]
def note(**kw):
    with open(log, "a") as f:
        f.write(json.dumps(kw) + "\n")
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self, status, obj, stream=False):
        out = json.dumps(obj).encode()
        if stream:
            out = b"data: " + out + b"\n\n"
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        h = {k.lower(): v for k, v in self.headers.items()}
        m, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        meta = params.get("_meta") or {}
        note(method=m, headers=h, meta=meta)
        if m == "initialize":
            return self.answer(404, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found: initialize"}})
        want_name = params.get("name") if m in ("tools/call", "prompts/get") else None
        if (h.get("mcp-protocol-version") != "2026-07-28" or meta.get("io.modelcontextprotocol/protocolVersion") != "2026-07-28"
                or h.get("mcp-method") != m or h.get("mcp-name") != want_name or "mcp-session-id" in h
                or not isinstance(meta.get("io.modelcontextprotocol/clientCapabilities"), dict)):
            return self.answer(400, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32020, "message": "HeaderMismatch"}})
        if m == "server/discover":
            return self.answer(200, {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete",
                "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "instructions": "Say hello.",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "2"}}}})
        if m == "tools/list":
            return self.answer(200, {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", "tools": [
                {"name": "hello", "inputSchema": {"type": "object"}}, {"name": "ask", "inputSchema": {"type": "object"}},
                {"name": "slow", "inputSchema": {"type": "object"}}]}})
        name = params.get("name")
        if name == "hello":
            who = meta.get("io.modelcontextprotocol/clientInfo", {}).get("name")
            return self.answer(200, {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete",
                "content": [{"type": "text", "text": "hello " + str(who) + " " + json.dumps(params.get("arguments"))}]}}, stream=True)
        if name == "ask":
            return self.answer(200, {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "input_required",
                "inputRequests": {"q": {"method": "elicitation/create", "params": {"message": "Sure?"}}}}})
        if name == "slow":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for _ in range(30):  # 3 s, a comment line every 0.1 s: a closed stream shows as a failed write
                time.sleep(0.1)
                try:
                    self.wfile.write(b": waiting\n\n")
                    self.wfile.flush()
                except OSError:
                    note(method="closed", headers={}, meta={})
                    return
            note(method="not closed", headers={}, meta={})
            return
        return self.answer(404, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such tool"}})
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_stateless_revision():
    """A 2026-07-28 server: found by server/discover, spoken without initialize or a session, every request
    with the revision's _meta and headers; a result asking for input is a clear error; a call past its
    timeout closes its stream (that revision's cancellation) instead of posting notifications/cancelled."""
    with Agentd(start=False) as a:
        port, log = free_port(), os.path.join(a.dir, "requests.jsonl")
        srv = subprocess.Popen(["python3", a.script("modern_mcp.py", MODERN), str(port), log], start_new_session=True)
        try:
            wait_listening(port, srv, "the 2026-07-28 server")
            a.write_config(f"""
[mcp.m]
url = http://127.0.0.1:{port}/mcp
timeout = 1s
""")
            a.start()
            c = a.create(settings={"model": "echo", "tools": ["m"]})
            r = call(a, c, "m__hello", {"x": 1})
            assert r["status"] == "resolved" and r["result"] == {"text": 'hello agentd {"x": 1}'}, r
            r = call(a, c, "m__ask")
            assert r["status"] == "errored", r
            assert r["result"]["error"] == ("MCP error -32000: the MCP server asked for input (resultType "
                                            "input_required), which agentd does not give"), r
            r = call(a, c, "m__slow")
            assert r["status"] == "errored" and r["result"]["error"] == "timed out after 1000 ms", r
            def logged():
                with open(log) as f:
                    return [json.loads(line) for line in f]
            wait_for(lambda: any(q["method"] in ("closed", "not closed") for q in logged()), 30,
                     "the slow call's stream to be closed")
            reqs = logged()
            methods = [q["method"] for q in reqs]
            assert methods == ["server/discover", "tools/list", "tools/call", "tools/call", "tools/call", "closed"], methods
            assert all(q["meta"].get("io.modelcontextprotocol/clientInfo", {}).get("name") == "agentd"
                       for q in reqs if q["headers"]), reqs
            assert [q["headers"].get("mcp-name") for q in reqs if q["method"] == "tools/call"] == ["hello", "ask", "slow"]
            assert a.log().count("mcp m: started") == 1, a.log_tail()
        finally:
            srv.kill()
            srv.wait()


def test_url_configurations_refused():
    bad = [
        ("[mcp.x]\nurl = ftp://example.com/mcp\n", "bad value 'ftp://example.com/mcp' for 'url' in [mcp.x]"),
        ("[mcp.x]\nurl = http://exa mple.com/\n", "for 'url' in [mcp.x]"),
        ("[mcp.x]\nurl = http://127.0.0.1:1/mcp\ncommand = true\n", "[mcp.x] needs a command or a url, not both"),
        ("[mcp.x]\nurl = http://127.0.0.1:1/mcp\nargs = --x\n", "[mcp.x] args is for a command"),
        ("[mcp.x]\nurl = http://127.0.0.1:1/mcp\nnetwork = none\n",
         "[mcp.x] network = none leaves a url server unreachable"),
        ("[mcp.x]\nprefix = p_\n", "[mcp.x] needs a command (stdio) or a url (streamable HTTP)"),
        ("[mcp.x]\ncommand = true\nheaders = \"X-A: b\"\n", "[mcp.x] headers are for a url server"),
        ("[mcp.x]\nurl = http://127.0.0.1:1/mcp\nheaders = \"Mcp-Session-Id: s\"\n",
         "[mcp.x] headers: Mcp-Session-Id cannot be configured: agentd sets it"),
        ("[mcp.x]\nurl = http://127.0.0.1:1/mcp\nheaders = \"mcp-method: tools/call\"\n",
         "[mcp.x] headers: mcp-method cannot be configured: agentd sets it"),
        ("[mcp.x]\nurl = http://127.0.0.1:1/mcp\nheaders = \"X-A: $AGENTD_TEST_UNSET_VAR\"\n",
         "[mcp.x] headers: the variable AGENTD_TEST_UNSET_VAR is not set"),
    ]
    for cfg, want in bad:
        harness.config_refused(cfg, want)


if __name__ == "__main__":
    if not SERVER.exists():
        raise SystemExit(f"no MCP server at {SERVER}: run scripts/deps.sh (npm ci in tests/mcp)")
    harness.main(globals())
