"""The built-in `openai` model kind against a fake chat completions server (fake_openai.py) that refuses what
the real API refuses: the real agentd and workers, a real HTTP exchange with SSE streaming, real tools."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Agentd, wait_for, scaled, REPO  # noqa: E402
from fake_openai import FakeOpenAI  # noqa: E402

CALC = os.path.join(REPO, "scripts", "tools", "calc.py")


def config(fake, extra="", model_extra=""):
    return f"""
        [agentd]
        audit = on
        {extra}
        [model.gpt]
        kind = openai
        base_url = {fake.url}
        model = gpt-fake
        api_key_env = FAKE_OPENAI_KEY
        backoff = 50ms
        {model_extra}
        [tool.calc]
        command = python3 {CALC} --journal JOURNAL
        description = Evaluate arithmetic: {{"expr": "1+2"}}
        [tool.approve]
        executor = human
        prompt = Go ahead?
        """


def agentd(fake, **kw):
    a = Agentd(start=False, env=dict(os.environ, FAKE_OPENAI_KEY="sk-test"))
    a.write_config(config(fake, **kw).replace("JOURNAL", os.path.join(a.dir, "journal")))
    a.start()
    return a


def metric(a, name):
    lines = [x for x in a.ok({"op": "metrics"})["text"].splitlines() if x.startswith(name + " ")]
    assert len(lines) == 1, name
    return int(lines[0].split()[1])


def assistant_texts(a, c):
    return [e["content"]["text"] for e in a.events(c, type="assistant_msg")]


def test_plain_turn_streams_deltas_to_watchers():
    with FakeOpenAI() as fake, agentd(fake) as a:
        text = "Hello, wörld — streamed in pieces ✓ and more"
        fake.script = [{"text": text, "usage": {"input": 12, "output": 7}}]
        c = a.create(model="gpt", settings={"model": "gpt", "system": "Be brief."})
        w = a.watch(c)
        a.send(c, "hi there")
        deltas, got = [], None
        while got is None:
            line = w.recv(timeout=scaled(20))
            if "delta" in line:
                deltas.append(line["delta"]["text"])
            elif line.get("event", {}).get("type") == "assistant_msg":
                got = line["event"]["content"]["text"]
        w.close()
        assert got == text, got
        assert "".join(deltas) == text and len(deltas) > 3, deltas
        r = fake.requests[0]
        assert r.headers["Authorization"] == "Bearer sk-test"
        assert r.body["model"] == "gpt-fake" and r.body["stream"] is True, r.body
        assert r.body["messages"] == [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "hi there"}], r.body["messages"]
        assert [t["function"]["name"] for t in r.body.get("tools", [])] == [], r.body  # none in settings
        usage = a.ok({"op": "get", "conversation": c})["conversation"]["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (12, 7), usage
        rows = a.ok({"op": "audit", "conversation": c})["model_calls"]
        assert len(rows) == 1 and rows[0]["rendered_context"]["body"]["model"] == "gpt-fake", rows
        assert [x["status"] for x in rows[0]["rendered_context"]["attempts"]] == [200], rows


def test_tool_round_trip_and_parallel_calls():
    with FakeOpenAI() as fake, agentd(fake) as a:
        fake.script = [
            {"text": "", "tool_calls": [{"name": "calc", "arguments": '{"expr": "6*7"}'}]},
            {"text": "it is 42"},
            {"text": "both:", "tool_calls": [{"name": "calc", "arguments": '{"expr": "1+1"}'},
                                             {"name": "calc", "arguments": '{"expr": "2+2"}'}]},
            {"text": "2 and 4"},
        ]
        c = a.create(settings={"model": "gpt", "tools": ["calc"]})
        a.send(c, "what is 6*7?")
        wait_for(lambda: "it is 42" in assistant_texts(a, c), 30, "the answer after the tool")
        results = a.events(c, type="tool_result")
        assert len(results) == 1 and results[0]["content"]["status"] == "resolved", results
        second = fake.requests[1].body["messages"]
        assert [m["role"] for m in second] == ["user", "assistant", "tool"], second
        call = second[1]["tool_calls"][0]
        assert second[1]["content"] is None and call["function"]["name"] == "calc", second
        assert json.loads(call["function"]["arguments"]) == {"expr": "6*7"}, call
        assert second[2]["tool_call_id"] == call["id"] == results[0]["content"]["tool_call_id"], second
        assert "42" in second[2]["content"], second
        tools = fake.requests[0].body["tools"]
        assert tools[0]["function"]["name"] == "calc" and "parameters" in tools[0]["function"], tools

        a.send(c, "now 1+1 and 2+2 at once")
        wait_for(lambda: "2 and 4" in assistant_texts(a, c), 30, "the answer after two parallel calls")
        calls = a.events(c, type="tool_call")
        assert len(calls) == 3 and [x["content"]["args"] for x in calls[1:]] == [{"expr": "1+1"}, {"expr": "2+2"}]
        fourth = fake.requests[3].body["messages"]
        assert [m["role"] for m in fourth] == ["user", "assistant", "tool", "assistant", "user", "assistant",
                                               "tool", "tool"], fourth
        assert {m["tool_call_id"] for m in fourth[6:]} == {t["id"] for t in fourth[5]["tool_calls"]}, fourth
        assert len(fake.requests) == 4


def test_approval_with_a_message_arriving_meanwhile():
    with FakeOpenAI() as fake, agentd(fake) as a:
        fake.script = [{"text": "asking", "tool_calls": [{"name": "approve", "arguments": '{"what": "deploy"}'}]},
                       {"text": "deployed; and noted"}]
        c = a.create(settings={"model": "gpt", "tools": ["approve"]})
        a.send(c, "deploy please")
        call = wait_for(lambda: a.events(c, type="suspension"), 30, "the approval request")[0]["content"]
        a.send(c, "also, tell me when done")   # arrives while the call awaits a person
        a.ok({"op": "resolve", "tool_call_id": call["tool_call_id"], "result": {"approved": True}})
        wait_for(lambda: "deployed; and noted" in assistant_texts(a, c), 30, "the turn after the approval")
        msgs = fake.requests[1].body["messages"]
        # The tool result directly follows its call; the message sent meanwhile comes after it.
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"], msgs
        assert msgs[2]["tool_call_id"] == call["tool_call_id"] and "approved" in msgs[2]["content"], msgs
        assert msgs[3]["content"] == "also, tell me when done", msgs
        assert not a.events(c, type="error"), a.events(c)


def test_message_sent_while_a_turn_runs_follows_that_turn():
    with FakeOpenAI() as fake, agentd(fake) as a:
        fake.script = [{"text": "first answer", "delay": 1.0}, {"text": "second answer"}]
        c = a.create(settings={"model": "gpt"})
        a.send(c, "one")
        wait_for(lambda: fake.requests, 20, "the first request")
        a.send(c, "two")  # the first turn is still waiting for its answer
        wait_for(lambda: "second answer" in assistant_texts(a, c), 30, "the second turn")
        first = a.events(c, type="assistant_msg")[0]["content"]
        assert first["context_seq"] == 1, first
        msgs = fake.requests[1].body["messages"]
        assert [(m["role"], m["content"]) for m in msgs] == [("user", "one"), ("assistant", "first answer"),
                                                              ("user", "two")], msgs


def test_retry_after_is_honoured_and_each_attempt_audited():
    with FakeOpenAI() as fake, agentd(fake, model_extra="retries = 4") as a:
        fake.script = [{"status": 429, "retry_after": "1"}, {"status": 503},
                       {"text": "partial answer that is cut", "cut": 3}, {"text": "finally"}]
        c = a.create(settings={"model": "gpt"})
        a.send(c, "hi")
        wait_for(lambda: "finally" in assistant_texts(a, c), 30, "the answer after the retries")
        t = [r.t for r in fake.requests]
        assert len(t) == 4, [r.status for r in fake.requests]
        assert t[1] - t[0] >= 1.0, f"retried {t[1] - t[0]:.3f} s after a Retry-After of 1 s"
        rows = a.ok({"op": "audit", "conversation": c})["model_calls"]
        att = rows[0]["rendered_context"]["attempts"]
        assert [x["status"] for x in att] == [429, 503, 200, 200], att
        assert att[0]["retry_after_ms"] == 1000 and att[0]["wait_ms"] >= 1000, att
        assert "cut mid-stream" in att[2]["error"], att
        assert "error" not in att[3], att
        assert not a.events(c, type="error")
        assert "retrying" in a.log()
        assert [metric(a, "agentd_model_" + n + "_total") for n in
                ("calls", "attempts", "attempt_failures", "call_failures")] == [1, 4, 3, 0]


def test_bad_request_is_not_retried_and_quoted():
    with FakeOpenAI() as fake, agentd(fake, model_extra="retries = 3") as a:
        msg = "Invalid 'messages[1].content': string too long. Expected a maximum length of 10, got 11."
        fake.script = [{"status": 400, "message": msg}]
        c = a.create(settings={"model": "gpt"})
        a.send(c, "hi")
        err = wait_for(lambda: a.events(c, type="error"), 20, "the error event")[0]["content"]
        assert err["attempts"] == 1 and msg in err["message"] and "HTTP 400" in err["message"], err
        assert len(fake.requests) == 1
        rows = a.ok({"op": "audit", "conversation": c})["model_calls"]
        assert rows and rows[0]["rendered_context"]["attempts"][0]["status"] == 400, rows
        # A server that ignores "stream": said so, not retried.
        fake.script = [{"json_body": {"object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "unstreamed"}, "finish_reason": "stop"}]}}]
        a.send(c, "stream please")
        wait_for(lambda: len(a.events(c, type="error")) == 2, 20, "the error for a non-stream")
        err = a.events(c, type="error")[1]["content"]
        assert err["attempts"] == 1 and "without streaming" in err["message"] and "unstreamed" in err["message"], err
        # A wrong key: 401, not retried either, with the server's words.
        fake.key = "sk-other"
        a.send(c, "again")
        wait_for(lambda: len(a.events(c, type="error")) == 3, 20, "the third error")
        err = a.events(c, type="error")[2]["content"]
        assert err["attempts"] == 1 and "HTTP 401" in err["message"] and "Incorrect API key" in err["message"], err


def test_unanswered_retries_end_in_an_error_event():
    with FakeOpenAI() as fake, agentd(fake, model_extra="retries = 2") as a:
        fake.script = [{"status": 500}, {"status": 502}, {"status": 500, "message": "still broken"}]
        c = a.create(settings={"model": "gpt"})
        a.send(c, "hi")
        err = wait_for(lambda: a.events(c, type="error"), 30, "the error event")[0]["content"]
        assert err["attempts"] == 3 and "still broken" in err["message"], err
        assert len(fake.requests) == 3
        assert [metric(a, "agentd_model_" + n + "_total") for n in
                ("calls", "attempts", "attempt_failures", "call_failures")] == [1, 3, 3, 1]
        # A Retry-After past what the call may wait (max(backoff_max, 60 s)) is not waited for early.
        fake.script = [{"status": 429, "retry_after": "3600"}]
        a.send(c, "again")
        wait_for(lambda: len(a.events(c, type="error")) == 2, 20, "the second error")
        err = a.events(c, type="error")[1]["content"]
        assert err["attempts"] == 1 and "asks to retry after 3600 s, over 60 s" in err["message"], err
        assert len(fake.requests) == 4


def test_kill_mid_stream_reruns_the_turn_without_double_usage():
    with FakeOpenAI() as fake, agentd(fake) as a:
        hold = threading.Event()
        fake.script = [{"text": "this answer is never finished " * 4, "hold": hold, "usage": {"input": 100, "output": 50}},
                       {"text": "the whole answer", "usage": {"input": 11, "output": 3}}]
        c = a.create(settings={"model": "gpt"})
        w = a.watch(c)
        a.send(c, "hi")
        while "delta" not in w.recv(timeout=scaled(20)):
            pass  # the first answer is streaming
        pid = a.worker_pid(c)
        os.kill(pid, signal.SIGKILL)
        try:
            wait_for(lambda: "the whole answer" in assistant_texts(a, c), 40, "the re-run turn")
        finally:
            hold.set()
            w.close()
        assert len(a.events(c, type="assistant_msg")) == 1
        usage = a.ok({"op": "get", "conversation": c})["conversation"]["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (11, 3), usage
        assert len(fake.requests) == 2 and fake.requests[1].body == fake.requests[0].body


def helper_pid(a, c, timeout=20):
    """The pid of the agentd-model process the conversation's worker runs, once there is one."""
    def find():
        w = a.worker_pid(c)
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            st = harness.proc_stat(int(name))
            try:
                with open(f"/proc/{name}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if st and w and st[1] == w and comm == "agentd-model":
                return int(name)
        return None
    return wait_for(find, timeout, "agentd-model running")


def test_killed_agentd_model_is_an_interrupted_attempt_retried():
    """kill -9 of agentd-model mid-stream: the attempt is interrupted, logged and retried in the same worker;
    the answer comes once, and only the answered attempt's usage counts."""
    with FakeOpenAI() as fake, agentd(fake) as a:
        hold = threading.Event()
        fake.script = [{"text": "this answer is never finished " * 4, "hold": hold, "usage": {"input": 100, "output": 50}},
                       {"text": "the whole answer", "usage": {"input": 11, "output": 3}}]
        c = a.create(settings={"model": "gpt"})
        w = a.watch(c)
        a.send(c, "hi")
        try:
            while "delta" not in w.recv(timeout=scaled(20)):
                pass  # the first answer is streaming
            worker = a.worker_pid(c)
            os.kill(helper_pid(a, c), signal.SIGKILL)
            wait_for(lambda: "the whole answer" in assistant_texts(a, c), 40, "the retried attempt's answer")
        finally:
            hold.set()
            w.close()
        assert a.worker_pid(c) in (worker, None), "the worker itself was not restarted"
        assert len(a.events(c, type="assistant_msg")) == 1
        assert not a.events(c, type="error"), a.events(c, type="error")
        usage = a.ok({"op": "get", "conversation": c})["conversation"]["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (11, 3), usage
        assert len(fake.requests) == 2 and fake.requests[1].body == fake.requests[0].body
        assert f"{c}: model gpt attempt 1 of 3 interrupted: model gpt: agentd-model killed by signal 9; " \
            "retrying in 200 ms" in a.log(), a.log_tail()
        # The audit row has both attempts, the interrupted one first.
        rows = a.ok({"op": "audit", "conversation": c})["model_calls"]
        att = rows[0]["rendered_context"]["attempts"]
        assert len(rows) == 1 and len(att) == 2, rows
        assert att[0]["error"] == "model gpt: agentd-model killed by signal 9" and "error" not in att[1], att
        assert metric(a, "agentd_model_attempts_total") == 2, a.ok({"op": "metrics"})["text"]


def test_killed_agentd_model_without_retries_is_a_clean_error():
    """retries = 0: the killed attempt ends the turn in an error event whose message ends at the signal (no
    dangling ": " for an empty stderr), and the log says so; an exec model that always dies reads the same."""
    with FakeOpenAI() as fake:
        a = Agentd(start=False, env=dict(os.environ, FAKE_OPENAI_KEY="sk-test"))
        die = a.script("die.py", """
            import os, signal, sys
            sys.stdin.read()
            os.kill(os.getpid(), signal.SIGKILL)
            """)
        a.write_config(textwrap.dedent(config(fake, model_extra="retries = 0")).replace("JOURNAL", a.dir + "/j")
                       + f"[model.die]\ncommand = {die}\nretries = 0\n")
        a.start()
        with a:
            hold = threading.Event()
            fake.script = [{"text": "this answer is never finished " * 4, "hold": hold}]
            c = a.create(settings={"model": "gpt"})
            w = a.watch(c)
            a.send(c, "hi")
            try:
                while "delta" not in w.recv(timeout=scaled(20)):
                    pass
                os.kill(helper_pid(a, c), signal.SIGKILL)
                err = wait_for(lambda: a.events(c, type="error"), 40, "the error event")[0]["content"]
            finally:
                hold.set()
                w.close()
            assert err["message"] == "model gpt: agentd-model killed by signal 9", err
            assert err["attempts"] == 1, err
            assert not a.events(c, type="assistant_msg")
            assert f"{c}: model gpt attempt 1 of 1 interrupted: model gpt: agentd-model killed by signal 9\n" \
                in a.log(), a.log_tail()
            a.ok({"op": "update", "conversation": c, "settings": {"model": "die"}})
            a.send(c, "again")
            err = wait_for(lambda: a.events(c, type="error")[1:], 40, "the exec model's error")[0]["content"]
            assert err["message"] == "model die killed by signal 9", err
            assert len(fake.requests) == 1


def test_bad_configuration_is_refused():
    with FakeOpenAI() as fake:
        for section, why in [("kind = openai\n", "needs model"),
                             ("kind = openai\nmodel = m\ncommand = /bin/true\n", "takes no command"),
                             ("kind = gemini\nmodel = m\n", "bad value"),
                             ("kind = openai\nmodel = m\nbase_url = file:///etc/passwd\n", "bad value"),
                             ("kind = openai\nmodel = m\nparams = [1]\n", "bad value")]:
            a = Agentd(start=False)
            a.write_config("[model.m]\n" + section)
            assert a.expect_exit() == 2 and why in a.log(), (section, a.log())
            a.close()


def test_headers_arrive_and_are_never_logged():
    secret = "gw-secret-7f3a91c2"
    with FakeOpenAI() as fake:
        a = Agentd(start=False, env=dict(os.environ, FAKE_OPENAI_KEY="sk-test", GW_TOKEN=secret))
        extra = "\n        ".join(['headers = "X-Gateway-Token: ${GW_TOKEN}" "api-key: $GW_TOKEN" '
                                     '"X-Note: costs $$5, see ${GW_TOKEN}x"'])
        a.write_config(config(fake, model_extra=extra).replace("JOURNAL", os.path.join(a.dir, "journal")))
        a.start()
        try:
            fake.script = [{"status": 503}, {"text": "hello", "usage": {"input": 3, "output": 2}}]
            c = a.create(model="gpt", settings={"model": "gpt"})
            a.send(c, "hi")
            wait_for(lambda: assistant_texts(a, c) == ["hello"], 20, "the answer")
            for r in fake.requests:  # the retried attempt carries them too
                assert r.headers["X-Gateway-Token"] == secret, r.headers
                assert r.headers["api-key"] == secret and r.headers["Authorization"] == "Bearer sk-test"
                assert r.headers["X-Note"] == f"costs $5, see {secret}x", r.headers
            audit = json.dumps(a.ok({"op": "audit", "conversation": c}))
            assert secret not in a.log() and secret not in audit
            assert secret not in json.dumps(a.events(c))
        finally:
            a.close()


def test_bad_headers_and_prices_are_refused_at_start():
    lit = "lit-secret-55e1"
    cases = [
        ('headers = "Bad Name: x"', {}, "[model.m] headers: header 1 is not 'Name: value'"),
        ('headers = "X-A 1"', {}, "header 1 is not 'Name: value'"),
        ('headers = "X-A: $NO_SUCH_VAR_38"', {}, "headers: the variable NO_SUCH_VAR_38 is not set"),
        ('headers = "X-A: $HDR_VAL"', {"HDR_VAL": "s3cr3t-cr\r\nX-Injected: 1"},
         "X-A's value has a control character (CR, LF, ...)"),
        ('headers = "X-A: $HDR_VAL"', {"HDR_VAL": "s3cr3t-lf\nX: 1"}, "X-A's value has a control character"),
        ('headers = "X-A: $HDR_VAL"', {"HDR_VAL": ""}, "X-A's value is empty"),
        (f'headers = "X-A: {lit} $ 1"', {}, "a '$' that starts no variable"),
        ('headers = "content-type: text/plain"', {}, "content-type cannot be configured: agentd sets it"),
        ('headers = "Authorization: Bearer x"', {"OPENAI_API_KEY": "sk-x"},
         "Authorization cannot be configured: agentd sends the key api_key_env names"),
        ('headers = "X-A: 1" "x-a: 2"', {}, "x-a cannot be configured: it is given twice"),
        ('headers = "X-A: 1\nheaders = X-B: 2"', {}, "set twice"),
        ('price_input = -1', {}, "bad value '-1' for 'price_input'"),
        ('price_output = 1e3', {}, "bad value '1e3' for 'price_output'"),
    ]
    for line, env, why in cases:
        a = Agentd(start=False, env=dict(os.environ, **env))
        a.write_config("[model.m]\nkind = openai\nmodel = m\n" + line.replace("\\n", "\n") + "\n")
        assert a.expect_exit() == 2 and why in a.log(), (line, a.log())
        assert "s3cr3t" not in a.log() and lit not in a.log(), a.log()
        a.close()
    # an Authorization header is the configured one when no key is set; exec models take neither key
    a = Agentd(start=False, env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"})
    a.write_config("[model.m]\nkind = openai\nmodel = m\nheaders = \"Authorization: Gateway t\"\n"
                   "[model.e]\ncommand = /bin/true\nprice_input = 1\n")
    assert a.expect_exit() == 2 and "[model.e] is kind exec: headers, price_input and price_output" in a.log(), \
        a.log()
    a.close()


def test_prices_make_usage_cost_and_a_cost_budget_binds():
    with FakeOpenAI() as fake, agentd(fake, model_extra="price_input = 2.5\n        price_output = 10.125") as a:
        fake.script = [{"text": f"answer {i}", "usage": {"input": 1000 + i, "output": 200 + i}} for i in range(3)]
        cost = [((1000 + i) * 2.5 + (200 + i) * 10.125) / 1e6 for i in range(3)]
        c = a.create(model="gpt", settings={"model": "gpt", "budget": {"max_cost": cost[0] + cost[1] / 2}})
        a.send(c, "one")
        wait_for(lambda: len(assistant_texts(a, c)) == 1, 20, "the first answer")
        assert a.ok({"op": "get", "conversation": c})["conversation"]["usage"]["cost"] == cost[0]
        a.send(c, "two")
        wait_for(lambda: len(assistant_texts(a, c)) == 2, 20, "the second answer")
        a.send(c, "three")
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "paused", 20,
                 "paused on the budget")
        why = a.events(c, type="budget_exceeded")[-1]["content"]
        assert (why["limit"], why["used"]) == ("max_cost", cost[0] + cost[1]), why
        assert len(assistant_texts(a, c)) == 2 and len(fake.requests) == 2


def test_timeout_connection_refused_and_a_stop_mid_call():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()  # nothing listens there now
    with FakeOpenAI() as fake, agentd(fake, model_extra=f"""timeout = 1s
        retries = 1
        [model.gone]
        kind = openai
        base_url = http://127.0.0.1:{dead}/v1
        model = m
        retries = 1
        backoff = 50ms""") as a:
        fake.script = [{"text": "too slow", "delay": 3}, {"text": "quick"}]
        c = a.create(settings={"model": "gpt"})
        a.send(c, "hi")
        wait_for(lambda: "quick" in assistant_texts(a, c), 30, "the answer after a timeout")
        att = a.ok({"op": "audit", "conversation": c})["model_calls"][0]["rendered_context"]["attempts"]
        assert "timed out" in att[0]["error"] and att[0]["status"] == 0, att

        g = a.create(settings={"model": "gone"})
        a.send(g, "hi")
        err = wait_for(lambda: a.events(g, type="error"), 20, "the error event")[0]["content"]
        assert err["attempts"] == 2 and "cannot reach http://127.0.0.1:" in err["message"], err

        fake.script = [{"text": "never sent", "delay": 30}]
        a.send(c, "a slow one")
        wait_for(lambda: len(fake.requests) == 3, 20, "the slow request")
        pid = a.worker_pid(c)
        a.ok({"op": "stop", "conversation": c})
        wait_for(lambda: not harness.pid_alive(pid), 5, "the worker to leave mid-call")


def test_summary_of_tool_calls_and_the_turn_after_it():
    with FakeOpenAI() as fake, agentd(fake, extra="compact_events = 0") as a:
        fake.script = [{"tool_calls": [{"name": "calc", "arguments": '{"expr": "5+5"}'}]}, {"text": "ten"},
                       {"text": "noted"}, {"text": "SUMMARY: 5+5 is ten"}, {"text": "after the summary"}]
        c = a.create(settings={"model": "gpt", "tools": ["calc"], "system": "Sys."})
        a.send(c, "5+5?")
        wait_for(lambda: "ten" in assistant_texts(a, c), 30, "the first answer")
        a.send(c, "remember it")
        wait_for(lambda: "noted" in assistant_texts(a, c), 30, "the second answer")
        summ = a.ok({"op": "compact", "conversation": c})["summary"]
        assert summ and summ["content"]["text"] == "SUMMARY: 5+5 is ten", summ
        body = fake.requests[3].body
        assert "tools" not in body and [m["role"] for m in body["messages"]] == ["user"], body
        assert "[called calc" in body["messages"][0]["content"] and "Summarize" in body["messages"][0]["content"]
        a.send(c, "and now?")
        wait_for(lambda: "after the summary" in assistant_texts(a, c), 30, "the turn after the summary")
        msgs = fake.requests[4].body["messages"]
        assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("Sys.") and \
            "SUMMARY: 5+5 is ten" in msgs[0]["content"], msgs
        assert msgs[-1] == {"role": "user", "content": "and now?"}, msgs


def test_agentd_model_refuses_bad_use():
    helper = os.path.join(os.path.dirname(harness.AGENTD_BIN), "agentd-model")
    with FakeOpenAI() as fake:
        a = Agentd(start=False)
        text = textwrap.dedent(config(fake)).replace("JOURNAL", a.dir)
        path = a.write_config(text + "[model.cmd]\ncommand = /bin/true\n")
        for args, stdin, want in [([], "{}", "--config and --model are required"),
                                  (["--config", path, "--model", "cmd"], "{}", "not a model of kind openai"),
                                  (["--config", path, "--model", "gpt"], "[1", "not a JSON object"),
                                  (["--config", "/nonexistent.ini", "--model", "gpt"], "{}", "nonexistent.ini"),
                                  (["--config", path, "--model", "gpt", "--retries", "-1"], "{}", "0 to 100"),
                                  (["--config", path, "--model", "gpt", "--retries", "2x"], "{}", "0 to 100")]:
            p = subprocess.run([helper, *args], input=stdin, capture_output=True, text=True, timeout=30)
            assert p.returncode == 2 and want in p.stderr and not p.stdout, (args, p)
        assert not fake.requests
        a.close()


harness.main(globals())
