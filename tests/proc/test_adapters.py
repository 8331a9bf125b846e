"""The example adapters in scripts/: the OpenAI-compatible model adapter against a fake chat-completions
server on loopback, and the calc tool (including its idempotency by tool_call_id)."""
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import harness
from harness import Agentd, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADAPTER = os.path.join(ROOT, "scripts", "models", "openai_compat.py")
CALC = os.path.join(ROOT, "scripts", "tools", "calc.py")


class FakeOpenAI(BaseHTTPRequestHandler):
    requests = []

    def log_message(self, *a):
        pass

    def sse(self, chunks):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for c in chunks:
            self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body["_auth"] = self.headers.get("Authorization")
        FakeOpenAI.requests.append(body)
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.end_headers()
            return
        if body["messages"][-1]["role"] == "tool":
            self.sse([{"choices": [{"delta": {"content": "It is "}}]},
                      {"choices": [{"delta": {"content": "14."}}]},
                      {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 3}}])
        else:
            self.sse([{"choices": [{"delta": {"content": "Let me compute."}}]},
                      {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_1", "function":
                                                               {"name": "calc", "arguments": '{"expr": '}}]}}]},
                      {"choices": [{"delta": {"tool_calls": [{"index": 0, "function":
                                                               {"arguments": '"2 * (3 + 4)"}'}}]}}]},
                      {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9}}])


def test_openai_adapter_round_trip():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(os.environ, OPENAI_BASE_URL=f"http://127.0.0.1:{srv.server_port}/v1", OPENAI_API_KEY="sk-test")
    try:
        with Agentd(start=False, env=env) as a:
            a.write_config(f"""
                [model.gpt]
                command = python3 {ADAPTER} --model fake-model
                env = OPENAI_BASE_URL OPENAI_API_KEY
                timeout = 20s
                retries = 0
                [tool.calc]
                executor = server
                command = python3 {CALC} --journal {a.dir}/journal
                description = Evaluate arithmetic
                """)
            a.start()
            c = a.create(model="gpt", settings={"model": "gpt", "tools": ["calc"], "system": "Be brief."})
            w = a.watch(c)
            a.send(c, "what is 2*(3+4)?")
            evs = wait_for(lambda: [e for e in a.events(c) if e["type"] == "assistant_msg"][1:] and a.events(c),
                           20, "the second turn")
            types = [e["type"] for e in evs]
            assert types == ["user_msg", "assistant_msg", "tool_call", "tool_result", "assistant_msg"], types
            assert evs[1]["content"]["text"] == "Let me compute."
            assert evs[2]["content"]["tool_call_id"] == "call_1"  # the model's id kept
            assert evs[2]["content"]["args"] == {"expr": "2 * (3 + 4)"}
            assert evs[3]["content"]["result"] == {"expr": "2 * (3 + 4)", "value": 14}
            assert evs[4]["content"]["text"] == "It is 14."
            conv = a.ok({"op": "get", "conversation": c})["conversation"]
            assert conv["usage"]["input_tokens"] == 50 and conv["usage"]["output_tokens"] == 12, conv["usage"]
            # Deltas streamed to the watcher while the model spoke.
            lines = []
            wait_for(lambda: lines.append(w.recv()) or any("delta" in l for l in lines), 10, "a delta line")
            # What the API saw: the system prompt, the tools, the tool call and its result mapped back.
            first, second = FakeOpenAI.requests[0], FakeOpenAI.requests[1]
            assert first["model"] == "fake-model" and first["stream"] is True
            assert first["_auth"] == "Bearer sk-test"
            assert first["messages"][0] == {"role": "system", "content": "Be brief."}
            assert first["tools"][0]["function"]["name"] == "calc"
            assert second["messages"][-2]["tool_calls"][0]["id"] == "call_1"
            assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["tool_call_id"] == "call_1"
    finally:
        srv.shutdown()


def test_adapter_http_error_fails_the_attempt():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(os.environ, OPENAI_BASE_URL=f"http://127.0.0.1:{srv.server_port}/wrong")
    try:
        with Agentd(start=False, env=env) as a:
            a.write_config(f"""
                [model.gpt]
                command = python3 {ADAPTER} --model m
                env = OPENAI_BASE_URL OPENAI_API_KEY
                retries = 1
                """)
            a.start()
            c = a.create(model="gpt")
            a.send(c, "hi")
            err = wait_for(lambda: a.events(c, type="error"), 20, "the error event")
            assert err[0]["content"]["attempts"] == 2, err
            assert "HTTP 404" in err[0]["content"]["message"], err
    finally:
        srv.shutdown()


def run_calc(journal, call_id, expr):
    return subprocess.run(["python3", CALC, "--journal", journal],
                          input=json.dumps({"tool_call_id": call_id, "name": "calc", "args": {"expr": expr},
                                            "conversation": "c"}),
                          env=dict(os.environ, AGENTD_TOOL_CALL_ID=call_id), capture_output=True, text=True)


def test_calc_is_idempotent_by_tool_call_id():
    import tempfile
    d = tempfile.mkdtemp()
    r1 = run_calc(d, "t1", "1 + 2")
    assert r1.returncode == 0 and json.loads(r1.stdout)["value"] == 3, r1
    r2 = run_calc(d, "t1", "100 * 100")  # a re-dispatch: same id, answered from the journal
    assert r2.stdout == r1.stdout, r2
    bad = run_calc(d, "t2", "__import__('os')")
    assert bad.returncode != 0 and "only numbers" in bad.stderr, bad
    assert run_calc(d, "t3", "1/0").returncode != 0


harness.main(globals())
