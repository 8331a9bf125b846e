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
            assert [q["method"] for q in reqs] == ["initialize", "notifications/initialized", "tools/list",
                                                   "tools/call", "tools/call", "GET"], reqs
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
                if q["method"] != "initialize":  # the session and version initialize gave
                    assert h["mcp-session-id"] == "sess-1" and h["mcp-protocol-version"] == "2025-06-18", q
                else:
                    assert "mcp-session-id" not in h, q
        finally:
            fake.kill()
            fake.wait()


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
        ("[mcp.x]\nurl = http://127.0.0.1:1/mcp\nheaders = \"X-A: $AGENTD_TEST_UNSET_VAR\"\n",
         "[mcp.x] headers: the variable AGENTD_TEST_UNSET_VAR is not set"),
    ]
    for cfg, want in bad:
        harness.config_refused(cfg, want)


if __name__ == "__main__":
    if not SERVER.exists():
        raise SystemExit(f"no MCP server at {SERVER}: run scripts/deps.sh (npm ci in tests/mcp)")
    harness.main(globals())
