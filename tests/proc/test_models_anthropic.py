"""The built-in `anthropic` model kind against a fake Messages API (fake_anthropic.py) that refuses what the
real API refuses (alternating roles, tool_result pairing and placement, the system prompt's place): the real
agentd and workers, a real HTTP exchange with SSE streaming, real tools."""

import email.utils
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Agentd, wait_for, scaled, REPO  # noqa: E402
from fake_anthropic import FakeAnthropic  # noqa: E402

CALC = os.path.join(REPO, "scripts", "tools", "calc.py")


def agentd(fake, model_extra=""):
    a = Agentd(start=False, env=dict(os.environ, ANTHROPIC_API_KEY="sk-ant-test"))
    a.write_config(f"""
        [agentd]
        audit = on
        [model.claude]
        kind = anthropic
        base_url = {fake.url}
        model = claude-fake
        backoff = 50ms
        {model_extra}
        [tool.calc]
        command = python3 {CALC} --journal {os.path.join(a.dir, "journal")}
        description = Evaluate arithmetic
        [tool.approve]
        executor = human
        """)
    a.start()
    return a


def texts(a, c):
    return [e["content"]["text"] for e in a.events(c, type="assistant_msg")]


def test_plain_turn_system_prompt_and_deltas():
    with FakeAnthropic(key="sk-ant-test") as fake, agentd(fake) as a:
        text = "Bonjour — une réponse en morceaux ✓"
        fake.script = [{"text": text, "usage": {"input": 20, "output": 9}}]
        c = a.create(settings={"model": "claude", "system": "You are terse."})
        w = a.watch(c)
        a.send(c, "salut")
        deltas, got = [], None
        while got is None:
            line = w.recv(timeout=scaled(20))
            if "delta" in line:
                deltas.append(line["delta"]["text"])
            elif line.get("event", {}).get("type") == "assistant_msg":
                got = line["event"]["content"]["text"]
        w.close()
        assert got == text and "".join(deltas) == text, (got, deltas)
        r = fake.requests[0]
        assert r.headers["x-api-key"] == "sk-ant-test" and r.headers["anthropic-version"], r.headers
        assert r.body["system"] == "You are terse." and r.body["max_tokens"] == 4096, r.body
        assert r.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "salut"}]}], r.body
        usage = a.ok({"op": "get", "conversation": c})["conversation"]["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (20, 9), usage


def test_parallel_tool_calls_and_a_message_during_an_approval():
    with FakeAnthropic(key="sk-ant-test") as fake, agentd(fake) as a:
        fake.script = [
            {"text": "Let me compute.", "tool_calls": [{"name": "calc", "arguments": '{"expr": "3*3"}'},
                                                      {"name": "calc", "arguments": '{"expr": "4*4"}'}]},
            {"text": "9 and 16"},
            {"tool_calls": [{"name": "approve", "arguments": '{"action": "ship"}'}]},
            {"text": "shipped"},
        ]
        c = a.create(settings={"model": "claude", "tools": ["calc", "approve"]})
        a.send(c, "squares of 3 and 4?")
        wait_for(lambda: "9 and 16" in texts(a, c), 30, "the answer after two parallel calls")
        msgs = fake.requests[1].body["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"], msgs
        blocks = msgs[1]["content"]
        assert [b["type"] for b in blocks] == ["text", "tool_use", "tool_use"], blocks
        assert [b["input"] for b in blocks[1:]] == [{"expr": "3*3"}, {"expr": "4*4"}], blocks
        results = msgs[2]["content"]
        assert [b["tool_use_id"] for b in results] == [b["id"] for b in blocks[1:]], results
        assert "9" in results[0]["content"] and "16" in results[1]["content"], results

        a.send(c, "ship it")
        call = wait_for(lambda: a.events(c, type="suspension"), 30, "the approval")[0]["content"]
        a.send(c, "and tell the team")
        a.ok({"op": "resolve", "tool_call_id": call["tool_call_id"], "status": "errored",
              "result": {"reason": "not today"}})
        wait_for(lambda: "shipped" in texts(a, c), 30, "the turn after the approval")
        msgs = fake.requests[3].body["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant",
                                             "user"], msgs
        # the tool_result first, then the message that arrived meanwhile, in one user message
        last = msgs[-1]["content"]
        assert last[0]["type"] == "tool_result" and last[0]["tool_use_id"] == call["tool_call_id"], last
        assert last[0]["is_error"] is True and "not today" in last[0]["content"], last
        assert last[1] == {"type": "text", "text": "and tell the team"}, last
        assert msgs[4]["content"] == [{"type": "text", "text": "ship it"}], msgs
        assert not a.events(c, type="error")


def test_overload_and_stream_errors_are_retried_bad_requests_are_not():
    with FakeAnthropic(key="sk-ant-test") as fake, agentd(fake, "retries = 3") as a:
        # Retry-After as an HTTP-date two seconds ahead (whole seconds: at least one second's wait).
        date = lambda: email.utils.formatdate(time.time() + 2, usegmt=True)  # noqa: E731
        fake.script = [{"status": 529}, {"text": "half an answer", "stream_error": "overloaded_error"},
                       {"status": 429, "retry_after": date}, {"text": "at last"}]
        c = a.create(settings={"model": "claude"})
        a.send(c, "hi")
        wait_for(lambda: "at last" in texts(a, c), 30, "the answer after the retries")
        assert [r.status for r in fake.requests] == [529, 200, 429, 200]
        assert fake.requests[3].t - fake.requests[2].t >= 1.0
        att = a.ok({"op": "audit", "conversation": c})["model_calls"][0]["rendered_context"]["attempts"]
        assert "Overloaded" in att[0]["error"] and "overloaded_error" in att[1]["error"], att

        fake.script = [{"status": 400, "message": "messages.0.content.0.text: text content blocks must be non-empty"}]
        a.send(c, "again")
        err = wait_for(lambda: a.events(c, type="error"), 20, "the error event")[0]["content"]
        assert err["attempts"] == 1 and "text content blocks must be non-empty" in err["message"], err
        assert len(fake.requests) == 5

        fake.key = "another"
        a.send(c, "once more")
        wait_for(lambda: len(a.events(c, type="error")) == 2, 20, "the second error")
        err = a.events(c, type="error")[1]["content"]
        assert err["attempts"] == 1 and "HTTP 401: invalid x-api-key" in err["message"], err


def test_headers_prices_and_the_headers_agentd_owns():
    os.environ["GW_ANTH_TOKEN"] = "anth-gw-secret-19d0"  # agentd() passes os.environ on
    try:
        with FakeAnthropic(key="sk-ant-test") as fake, agentd(fake, model_extra=(
                'headers = "anthropic-beta: tools-2024" "cf-aig-authorization: Bearer ${GW_ANTH_TOKEN}"\n'
                '        price_input = 3\n        price_output = 15')) as a:
            fake.script = [{"text": "ok", "usage": {"input": 20, "output": 9}}]
            c = a.create(settings={"model": "claude"})
            a.send(c, "hi")
            wait_for(lambda: texts(a, c) == ["ok"], 20, "the answer")
            r = fake.requests[0]
            assert r.headers["anthropic-beta"] == "tools-2024", r.headers
            assert r.headers["cf-aig-authorization"] == "Bearer anth-gw-secret-19d0", r.headers
            assert r.headers["x-api-key"] == "sk-ant-test" and r.headers["anthropic-version"] == "2023-06-01"
            usage = a.ok({"op": "get", "conversation": c})["conversation"]["usage"]
            assert usage["cost"] == (usage["input_tokens"] * 3 + usage["output_tokens"] * 15) / 1e6, usage
            assert usage["cost"] > 0 and "anth-gw-secret-19d0" not in a.log()
    finally:
        del os.environ["GW_ANTH_TOKEN"]
    for line, why in [('headers = "anthropic-version: 2024-01-01"', "anthropic-version cannot be configured"),
                      ('headers = "X-Api-Key: k"', "X-Api-Key cannot be configured: agentd sends the key")]:
        a = Agentd(start=False, env=dict(os.environ, ANTHROPIC_API_KEY="sk-ant-test"))
        a.write_config(f"[model.c]\nkind = anthropic\nmodel = m\n{line}\n")
        assert a.expect_exit() == 2 and f"[model.c] headers: {why}" in a.log(), a.log()
        a.close()


def test_the_fake_refuses_what_the_api_refuses():
    """The fake's rules are real: a client that broke them would be told so."""
    import urllib.request
    import urllib.error
    with FakeAnthropic(key="k") as fake:
        def post(body):
            rq = urllib.request.Request(fake.url + "/messages", json.dumps(body).encode(), method="POST",
                                        headers={"x-api-key": "k", "anthropic-version": "2023-06-01",
                                                 "content-type": "application/json"})
            try:
                with urllib.request.urlopen(rq) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())
        base = {"model": "m", "max_tokens": 10}
        u = {"role": "user", "content": "hi"}
        use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc", "input": {}}]}
        res = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1"}]}
        tools = [{"name": "calc", "input_schema": {"type": "object"}}]
        for msgs, extra, want in [
                ([u, u], {}, "roles must alternate"),
                ([{"role": "system", "content": "x"}, u], {}, "top-level `system`"),
                ([u, use, u], {"tools": tools}, "without `tool_result`"),
                ([u, use, {"role": "user", "content": [{"type": "text", "text": "a"}] + res["content"]}],
                 {"tools": tools}, "must come first"),
                ([u, use, res], {}, "must define tools"),
                ([u, {"role": "assistant", "content": [{"type": "text", "text": ""}]}, u], {}, "non-empty")]:
            status, body = post(dict(base, messages=msgs, **extra))
            assert status == 400 and want in body["error"]["message"], (msgs, body)
        status, _ = post(dict(base, messages=[u, use, res], tools=tools))
        assert status == 200


def test_tools_removed_from_the_configuration_are_told_as_text():
    with FakeAnthropic(key="sk-ant-test") as fake, agentd(fake) as a:
        fake.script = [{"tool_calls": [{"name": "calc", "arguments": '{"expr": "2+2"}'}]}, {"text": "four"},
                       {"text": "still here"}]
        c = a.create(settings={"model": "claude", "tools": ["calc"]})
        a.send(c, "2+2?")
        wait_for(lambda: "four" in texts(a, c), 30, "the answer")
        cfg = open(a.config_path).read()
        a.stop()
        a.write_config(cfg.split("[tool.calc]")[0])  # calc is gone
        a.start()
        a.send(c, "and now?")
        wait_for(lambda: "still here" in texts(a, c), 30, "the turn without the tool")
        body = fake.requests[2].body
        assert "tools" not in body, body
        flat = json.dumps(body["messages"])
        assert "tool_use" not in flat and "[called calc" in flat and "[result of calc" in flat, flat


harness.main(globals())
