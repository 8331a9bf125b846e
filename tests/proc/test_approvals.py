"""Approvals (docs/protocol.md, `extend` and `resolve`'s `args_digest`; docs/tools.md, `on_expiry`) with the
real agentd, workers, store and agentctl: a pending call's deadline moved and fired once on time across a
kill -9, what was approved is what runs, and what happens when nobody answers. Every bad input is refused
with a clear error and nothing written.

The echo model calls a tool on "/tool NAME {args}". Durations in the configuration scale with
AGENTD_TEST_SLOW, so a slow run (valgrind) keeps the same order of events.
"""
import hashlib
import json
import os
import signal
import subprocess
import time

import harness
from harness import Agentd, scaled, wait_for
from webutil import AgentdWeb


def ms(secs):
    return int(scaled(secs) * 1000)


def config(expires_s=3600, warn_s=None, extra=""):
    text = (f"[tool.approve]\nexecutor = human\nexpires = {ms(expires_s)}ms\n"
            + (f"warn_before = {ms(warn_s)}ms\n" if warn_s else "")
            + "[tool.forever]\nexecutor = human\nexpires = 0\n"
            + "[tool.run]\ncommand = cat\n" + extra)
    return text


def start(text):
    a = Agentd(start=False)
    a.write_config(text)
    a.start()
    return a


def conv(a, tools=("approve", "forever", "run")):
    return a.ok({"op": "create", "settings": {"model": "echo", "tools": list(tools)}})["conversation"]


def pending(a, c):
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]


def ask(a, c, tool="approve", args='{"amount": 5}'):
    n = len(pending(a, c))
    a.send(c, f"/tool {tool} {args}")
    return wait_for(lambda: len(pending(a, c)) > n and pending(a, c)[-1], 20, "a pending call")


def call(a, tcid):
    return a.ok({"op": "tool_call", "tool_call_id": tcid})["tool_call"]


def of_type(a, c, t, tcid=None):
    return [e for e in a.events(c) if e["type"] == t and (tcid is None or e["content"].get("tool_call_id") == tcid)]


def last_seq(a, c):
    return a.ok({"op": "events", "conversation": c, "limit": 1})["last_seq"]


def now_ms():
    return int(time.time() * 1000)


# ---- extend -------------------------------------------------------------------------------------------


def test_extend_moves_the_deadline_and_it_fires_then_once():
    # The ask and the extend land well within the first 4 s; the old deadline passing is checked 7.5 s
    # before the new one (both scaled): a loaded machine cannot make either race.
    a = start(config(expires_s=4))
    try:
        c = conv(a)
        tc = ask(a, c)
        old = tc["deadline"]
        new = old + ms(8)
        r = a.ok({"op": "extend", "conversation": c, "tool_call_id": tc["id"], "deadline": new, "by": "ops"})
        assert r["deadline"] == new and r["conversation"] == c, r
        assert call(a, tc["id"])["deadline"] == new
        ev = of_type(a, c, "deadline_extended")
        assert len(ev) == 1 and ev[0]["seq"] == r["seq"], ev
        assert ev[0]["content"] == {"tool_call_id": tc["id"], "name": "approve", "deadline": new, "previous": old,
                                    "by": {"uid": os.getuid(), "name": "ops"}}, ev
        # the old deadline passes: nothing fires
        wait_for(lambda: now_ms() > old + ms(0.5), 30, "the old deadline to pass")
        assert call(a, tc["id"])["status"] == "pending"
        assert not of_type(a, c, "resolution"), a.events(c)
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the expiry at the new deadline")
        res = of_type(a, c, "resolution")
        assert len(res) == 1 and res[0]["content"]["status"] == "expired", res
        assert res[0]["inserted_at"] >= new, (res, new)
        assert call(a, tc["id"])["status"] == "expired"
    finally:
        a.close()


def test_extend_with_expires_in_ms_and_agentctl():
    a = start(config())
    try:
        c = conv(a)
        tc = ask(a, c)
        before = now_ms()
        r = a.ok({"op": "extend", "conversation": c, "tool_call_id": tc["id"], "expires_in_ms": 7200000})
        assert before + 7200000 <= r["deadline"] <= now_ms() + 7200000, r
        assert of_type(a, c, "deadline_extended")[0]["content"]["by"] == {"uid": os.getuid()}
        rc, out, err = a.ctl("extend", c, tc["id"], "--expires-in", "10800000", "--by", "night shift")
        fields = {k.strip(): v.split()[0] for k, v in (line.split(":", 1) for line in out.splitlines())}
        assert int(fields["deadline"]) == call(a, tc["id"])["deadline"], (out, call(a, tc["id"]))
        assert int(fields["seq"]) == last_seq(a, c), out
        ev = of_type(a, c, "deadline_extended")[-1]["content"]
        assert ev["by"] == {"uid": os.getuid(), "name": "night shift"} and ev["previous"] == r["deadline"], ev
        rc, out, err = a.ctl("extend", c, tc["id"], "--deadline", str(now_ms() + 3600000), "-q")
        assert out.strip() == str(last_seq(a, c)), out
        rc, out, err = a.ctl("--json", "extend", c, tc["id"], "--expires-in", "60000")
        assert json.loads(out)["ok"] is True, out
        # agentctl's own refusals and agentd's, exit 1 with agentd's words
        rc, out, err = a.ctl("extend", c, tc["id"], check=False)
        assert rc == 2 and "nothing to do: give at least one option" in err, (rc, err)
        rc, out, err = a.ctl("extend", c, "nope", "--expires-in", "1000", check=False)
        assert rc == 1 and err.startswith("agentctl: not_found: tool call nope not found"), err
        rc, out, err = a.ctl("extend", c, tc["id"], "--deadline", "1000", check=False)
        assert rc == 1 and "agentctl: bad_request: the new deadline 1000 is not in the future" in err, err
    finally:
        a.close()


def test_extend_bad_inputs_write_nothing():
    a = start(config())
    try:
        c, c2, other = conv(a), conv(a), conv(a)
        done = ask(a, c, "approve", '{"amount": 1}')
        a.ok({"op": "resolve", "tool_call_id": done["id"], "result": {"approved": True}})
        wait_for(lambda: of_type(a, c, "assistant_msg") and len(of_type(a, c, "assistant_msg")) >= 2, 20,
                 "the turn after the resolve")
        tc = ask(a, c)
        forever = ask(a, c2, "forever")
        seq, seq2 = last_seq(a, c), last_seq(a, c2)
        deadline = call(a, tc["id"])["deadline"]
        cases = [
            ({"tool_call_id": tc["id"], "expires_in_ms": 1000}, "bad_request", "missing field 'conversation'"),
            ({"conversation": c, "expires_in_ms": 1000}, "bad_request", "missing field 'tool_call_id'"),
            ({"conversation": c, "tool_call_id": tc["id"]}, "bad_request",
             "missing field 'expires_in_ms' (or 'deadline': ms since the epoch)"),
            ({"conversation": c, "tool_call_id": tc["id"], "expires_in_ms": 1000, "deadline": now_ms() + 5000},
             "bad_request", "give one of 'expires_in_ms' and 'deadline', not both"),
            ({"conversation": c, "tool_call_id": tc["id"], "expires_in_ms": 0}, "bad_request",
             "'expires_in_ms' must be an integer from 1 to 31536000000"),
            ({"conversation": c, "tool_call_id": tc["id"], "expires_in_ms": "1h"}, "bad_request",
             "'expires_in_ms' must be an integer"),
            ({"conversation": c, "tool_call_id": tc["id"], "deadline": -5}, "bad_request",
             "'deadline' must be an integer from 1"),
            ({"conversation": c, "tool_call_id": tc["id"], "deadline": 1000}, "bad_request",
             "the new deadline 1000 is not in the future"),
            ({"conversation": c, "tool_call_id": tc["id"], "deadline": now_ms() - 1}, "bad_request",
             "is not in the future"),
            ({"conversation": c, "tool_call_id": tc["id"], "expires_in_ms": 1000, "by": ""}, "bad_request",
             "'by' must be a string of 1-128 bytes"),
            ({"conversation": c, "tool_call_id": tc["id"], "expires_in_ms": 1000, "by": "a\nb"}, "bad_request",
             "'by' must not hold control characters"),
            ({"conversation": c, "tool_call_id": tc["id"], "expires_in_ms": 1000, "until": 5}, "bad_request",
             "unknown field 'until' for op 'extend'"),
            ({"conversation": c, "tool_call_id": "nope", "expires_in_ms": 1000}, "not_found",
             "tool call nope not found in conversation " + c),
            ({"conversation": other, "tool_call_id": tc["id"], "expires_in_ms": 1000}, "not_found",
             f"tool call {tc['id']} not found in conversation {other}"),
            ({"conversation": c, "tool_call_id": done["id"], "expires_in_ms": 1000}, "stale",
             f"tool call {done['id']} is not pending"),
            ({"conversation": c2, "tool_call_id": forever["id"], "expires_in_ms": 1000}, "conflict",
             f"tool call {forever['id']} has no deadline"),
        ]
        for fields, code, msg in cases:
            r = a.request({"op": "extend", **fields})
            assert r["ok"] is False and r["error"] == code and msg in r["message"], (fields, r)
        assert last_seq(a, c) == seq and last_seq(a, c2) == seq2 and last_seq(a, other) == 0, a.events(c)
        assert call(a, tc["id"])["deadline"] == deadline
        assert call(a, forever["id"])["deadline"] is None
    finally:
        a.close()


def test_extend_then_kill_9_fires_once_at_the_new_deadline():
    a = start(config(expires_s=2))
    try:
        c = conv(a)
        tc = ask(a, c)
        old = tc["deadline"]
        new = old + ms(4)
        a.ok({"op": "extend", "conversation": c, "tool_call_id": tc["id"], "deadline": new})
        a.kill(signal.SIGKILL)
        # the old deadline passes while agentd is down: on start it is not fired
        wait_for(lambda: now_ms() > old + ms(0.5), 30, "the old deadline to pass while agentd is down")
        a.start()
        assert call(a, tc["id"])["status"] == "pending" and call(a, tc["id"])["deadline"] == new
        assert not of_type(a, c, "resolution"), a.events(c)
        # killed again before the new deadline, and started again after it: fired once, on start
        a.kill(signal.SIGKILL)
        wait_for(lambda: now_ms() > new + 50, 30, "the new deadline to pass while agentd is down")
        a.start()
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the expiry")
        a.kill(signal.SIGKILL)
        a.start()
        wait_for(lambda: of_type(a, c, "assistant_msg") and len(of_type(a, c, "assistant_msg")) >= 2, 30,
                 "the turn after the expiry")
        res = of_type(a, c, "resolution")
        assert len(res) == 1 and res[0]["content"]["status"] == "expired" and res[0]["inserted_at"] >= new, res
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


def test_extend_reschedules_the_warning():
    a = start(config(expires_s=2, warn_s=1.5))
    try:
        c = conv(a)
        tc = ask(a, c)
        wait_for(lambda: of_type(a, c, "expiry_warning"), 30, "the first warning")
        new = now_ms() + ms(3)
        a.ok({"op": "extend", "conversation": c, "tool_call_id": tc["id"], "deadline": new})
        wait_for(lambda: len(of_type(a, c, "expiry_warning")) == 2, 30, "the warning before the new deadline")
        w = of_type(a, c, "expiry_warning")[1]
        assert w["content"]["deadline"] == new and w["inserted_at"] >= new - ms(1.5), w
        assert not of_type(a, c, "resolution")
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the expiry")
        assert len(of_type(a, c, "expiry_warning")) == 2 and len(of_type(a, c, "resolution")) == 1
    finally:
        a.close()


def fake_agentd(path, digest_shown):
    """A one-connection stand-in for agentd on path: answers tool_call with digest_shown and any other
    request ok, and records every request line it read (list, filled by its thread)."""
    import socket
    import threading
    seen = []
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        f = conn.makefile("rwb")
        for line in f:
            rq = json.loads(line)
            seen.append(rq)
            if rq["op"] == "tool_call":
                reply = {"id": rq.get("id"), "ok": True, "tool_call": {"id": rq["tool_call_id"],
                                                                     "args_digest": digest_shown}}
            else:
                reply = {"id": rq.get("id"), "ok": True, "seq": 9, "conversation": "c"}
            f.write((json.dumps(reply) + "\n").encode())
            f.flush()
        conn.close()
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return seen, t


def test_agentctl_approve_sends_the_digest_agentd_shows_when_none_is_given():
    a = Agentd(start=False)
    ops_all = []
    try:
        for verb, given in [("approve", None), ("deny", None), ("approve", "e" * 64)]:
            path = os.path.join(a.dir, f"f{len(ops_all)}.sock")
            seen, t = fake_agentd(path, "d" * 64)
            args = [harness.AGENTCTL_BIN, "-s", path, verb, "tc-1"] + (["--args-digest", given] if given else [])
            p = subprocess.run(args, capture_output=True, text=True, timeout=scaled(20))
            t.join(scaled(10))
            assert p.returncode == 0, p.stderr
            ops = [(r["op"], r.get("args_digest")) for r in seen]
            assert ops == ([("tool_call", None)] if not given else []) + [("resolve", given or "d" * 64)], seen
            assert seen[-1]["result"] == {"approved": verb == "approve"}, seen
            ops_all.append(ops)
    finally:
        a.close()


# ---- args_digest ---------------------------------------------------------------------------------------


def jcs(v):
    """RFC 8785's canonical form, written here independently of the clients' helpers."""
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, (int, float)):
        x = float(v)
        if x == 0:
            return "0"
        if x.is_integer() and abs(x) < 1e21:
            return str(int(x))
        r = repr(x)
        if "e" in r:
            m, e = r.split("e")
            return m.rstrip("0").rstrip(".") + "e" + ("+" if int(e) > 0 else "-") + str(abs(int(e)))
        return r
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + jcs(v[k])
                          for k in sorted(v, key=lambda k: k.encode("utf-16-be"))) + "}"


def digest(v):
    return hashlib.sha256(jcs(v).encode("utf-8")).hexdigest()


ARGS = '{"to": "Zoë", "amount": 12.5, "memo": "line\\nnext", "items": [1, 2.0, {"b": true, "a": null}]}'


def test_pending_shows_the_digest_and_resolve_checks_it():
    a = start(config())
    try:
        c = conv(a)
        tc = ask(a, c, args=ARGS)
        assert tc["args"] == json.loads(ARGS)
        assert tc["args_digest"] == digest(tc["args"]), tc
        assert call(a, tc["id"])["args_digest"] == tc["args_digest"]
        seq = last_seq(a, c)
        wrong = "0" * 64
        r = a.request({"op": "resolve", "tool_call_id": tc["id"], "result": {"approved": True}, "args_digest": wrong})
        assert r["ok"] is False and r["error"] == "conflict" and r["args_digest"] == tc["args_digest"], r
        assert f"tool call {tc['id']}: its arguments are not those approved" in r["message"], r
        for bad in ["A" * 64, "0" * 63, "0" * 65, 5, "g" * 64, None]:
            r = a.request({"op": "resolve", "tool_call_id": tc["id"], "args_digest": bad})
            assert r["error"] == "bad_request" and "'args_digest' must be 64 lowercase hex digits" in r["message"], r
        assert last_seq(a, c) == seq and call(a, tc["id"])["status"] == "pending", a.events(c)
        r = a.ok({"op": "resolve", "tool_call_id": tc["id"], "result": {"approved": True},
                  "args_digest": tc["args_digest"]})
        assert call(a, tc["id"])["status"] == "resolved"
        # a settled call is stale whatever the digest
        r = a.request({"op": "resolve", "tool_call_id": tc["id"], "args_digest": wrong})
        assert r["error"] == "stale", r
        r = a.request({"op": "resolve", "tool_call_id": "nope", "args_digest": wrong})
        assert r["error"] == "stale", r
    finally:
        a.close()


def test_agentctl_approve_and_deny_always_send_the_digest():
    a = start(config())
    try:
        c = conv(a)
        tc = ask(a, c, args=ARGS)
        rc, out, err = a.ctl("pending")
        head, row = out.splitlines()[0], [l for l in out.splitlines() if l.startswith(tc["id"])][0]
        assert head.split()[-2:] == ["ARGS_DIGEST", "APPROVALS"], out
        assert row.split()[-2:] == [tc["args_digest"], "0/1"], out
        seq = last_seq(a, c)
        rc, out, err = a.ctl("approve", tc["id"], "--args-digest", "1" * 64, check=False)
        assert rc == 1 and err.startswith(f"agentctl: conflict: tool call {tc['id']}: its arguments are not"), err
        rc, out, err = a.ctl("deny", tc["id"], "--args-digest", "xyz", check=False)
        assert rc == 1 and "agentctl: bad_request: 'args_digest' must be 64 lowercase hex digits" in err, err
        assert last_seq(a, c) == seq and call(a, tc["id"])["status"] == "pending"
        rc, out, err = a.ctl("approve", tc["id"], "--args-digest", tc["args_digest"], "--by", "ops")
        assert call(a, tc["id"])["status"] == "resolved"
        wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 20, "the turn after the approval")
        tc2 = ask(a, c, args='{"amount": 6}')
        rc, out, err = a.ctl("--json", "deny", tc2["id"], "--comment", "no")
        assert json.loads(out)["ok"] is True
        assert call(a, tc2["id"])["result"] == {"approved": False, "comment": "no"}
        rc, out, err = a.ctl("approve", tc2["id"], check=False)
        assert rc == 1 and "agentctl: stale:" in err, err
        rc, out, err = a.ctl("approve", "no-such-call", check=False)
        assert rc == 1 and "agentctl: stale:" in err, err
        rc, out, err = a.ctl("resolve", tc2["id"], "--args-digest", "0" * 64, check=False)
        assert rc == 1 and "agentctl: stale:" in err, err
    finally:
        a.close()


def test_the_page_sends_the_digest_it_showed():
    a = start(config())
    try:
        with AgentdWeb(a) as w:
            c = conv(a)
            tc = ask(a, c, args=ARGS)
            st, _, b = w.get("/api/pending")
            shown = [t for t in json.loads(b)["pending"] if t["id"] == tc["id"]][0]
            assert st == 200 and shown["args_digest"] == tc["args_digest"], b
            seq = last_seq(a, c)
            hdr = {"Content-Type": "application/json"}
            body = {"tool_call_id": tc["id"], "decision": "approve", "args_digest": "2" * 64}
            st, _, b = w.post("/api/resolve", json.dumps(body), hdr, token=True)
            assert st == 409 and json.loads(b)["error"] == "conflict", (st, b)
            st, _, b = w.post("/api/resolve", json.dumps(dict(body, args_digest=7)), hdr, token=True)
            assert st == 400 and json.loads(b)["error"] == "bad_request", (st, b)
            assert last_seq(a, c) == seq and call(a, tc["id"])["status"] == "pending"
            st, _, b = w.post("/api/resolve", json.dumps(dict(body, args_digest=shown["args_digest"])), hdr,
                              token=True)
            assert st == 200, (st, b)
            assert call(a, tc["id"])["result"] == {"approved": True}
        # the page itself sends what it was given
        app = open(os.path.join(os.path.dirname(__file__), "..", "..", "web", "static", "app.js")).read()
        assert "body.args_digest = card.tc.args_digest" in app
    finally:
        a.close()


# ---- on_expiry ------------------------------------------------------------------------------------------


def policy_config(expires_s, **policies):
    text = ""
    for name, policy in policies.items():
        text += f"[tool.{name}]\nexecutor = human\nexpires = {ms(expires_s)}ms\non_expiry = {policy}\n"
    return text


def test_on_expiry_deny_and_approve_settle_at_the_deadline():
    a = start(policy_config(1, no="deny", yes="approve", plain="expire"))
    try:
        got = {}
        for tool in ("no", "yes", "plain"):
            c = conv(a, (tool,))
            tc = ask(a, c, tool)
            got[tool] = (c, tc)
        for tool, (c, tc) in got.items():
            wait_for(lambda: of_type(a, c, "resolution"), 30, f"{tool}'s deadline")
            wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 30, f"the turn after {tool}'s deadline")
            res = of_type(a, c, "resolution")
            assert len(res) == 1 and res[0]["inserted_at"] >= tc["deadline"], res
            if tool == "plain":
                assert res[0]["content"] == {"tool_call_id": tc["id"], "status": "expired", "result": None}, res
                assert call(a, tc["id"])["status"] == "expired"
                continue
            verdict = tool == "yes"
            assert res[0]["content"] == {"tool_call_id": tc["id"], "status": "resolved",
                                         "result": {"approved": verdict, "on_expiry": "approve" if verdict else "deny"},
                                         "by": {"name": "expiry"}}, res
            assert call(a, tc["id"])["status"] == "resolved"
            assert call(a, tc["id"])["result"]["approved"] is verdict
            # a late answer is stale: the deadline decided
            r = a.request({"op": "resolve", "tool_call_id": tc["id"], "result": {"approved": not verdict}})
            assert r["error"] == "stale", r
        assert "no answer by its deadline: settled as on_expiry = deny" in a.log()
    finally:
        a.close()


def test_on_expiry_approve_fires_once_across_kills_after_an_extend():
    a = start(policy_config(2, yes="approve"))
    try:
        c = conv(a, ("yes",))
        tc = ask(a, c, "yes")
        new = tc["deadline"] + ms(2)
        a.ok({"op": "extend", "conversation": c, "tool_call_id": tc["id"], "deadline": new})
        a.kill(signal.SIGKILL)
        wait_for(lambda: now_ms() > new + 50, 30, "the new deadline to pass while agentd is down")
        a.start()
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the approval on start")
        a.kill(signal.SIGKILL)
        a.start()
        wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 30, "the turn after the approval")
        res = of_type(a, c, "resolution")
        assert len(res) == 1 and res[0]["content"]["result"] == {"approved": True, "on_expiry": "approve"}, res
        assert res[0]["content"]["by"] == {"name": "expiry"} and res[0]["inserted_at"] >= new, res
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


ESCALATE = """
[tool.first]
executor = human
prompt = Team: approve?
expires = {first}ms
on_expiry = escalate
escalate_to = boss
[tool.boss]
executor = human
prompt = Boss: approve?
expires = {boss}ms
on_expiry = {then}
"""


def test_on_expiry_escalate_hands_the_call_on_and_records_the_chain():
    a = start(ESCALATE.format(first=ms(1), boss=ms(3), then="deny"))
    try:
        c = conv(a, ("first",))
        tc = ask(a, c, "first")
        assert tc["prompt"] == "Team: approve?"
        wait_for(lambda: of_type(a, c, "escalation"), 30, "the escalation")
        esc = of_type(a, c, "escalation")
        assert len(esc) == 1 and esc[0]["inserted_at"] >= tc["deadline"], esc
        e = esc[0]["content"]
        assert e["tool_call_id"] == tc["id"] and e["name"] == "first" and e["from"] == "first" and e["to"] == "boss", e
        assert e["prompt"] == "Boss: approve?" and e["chain"] == ["first", "boss"], e
        now = call(a, tc["id"])
        assert now["status"] == "pending" and now["prompt"] == "Boss: approve?" and now["deadline"] == e["deadline"], now
        assert e["deadline"] >= esc[0]["inserted_at"] + ms(3) - 5, e
        assert not of_type(a, c, "resolution")
        assert [p["id"] for p in pending(a, c)] == [tc["id"]]
        assert a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "suspended"
        # killed between the escalation and the boss's deadline: handed on once, then denied once
        a.kill(signal.SIGKILL)
        wait_for(lambda: now_ms() > e["deadline"] + 50, 30, "the boss's deadline to pass while agentd is down")
        a.start()
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the boss's deadline")
        a.kill(signal.SIGKILL)
        a.start()
        wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 30, "the turn after the denial")
        res = of_type(a, c, "resolution")
        assert len(res) == 1 and len(of_type(a, c, "escalation")) == 1, a.events(c)
        assert res[0]["content"]["result"] == {"approved": False, "on_expiry": "deny"}, res
        assert res[0]["content"]["by"] == {"name": "expiry"}, res
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


def test_an_escalated_call_is_answered_by_a_person():
    a = start(ESCALATE.format(first=ms(1), boss=3600000, then="expire"))
    try:
        c = conv(a, ("first",))
        tc = ask(a, c, "first")
        wait_for(lambda: of_type(a, c, "escalation"), 30, "the escalation")
        rc, out, err = a.ctl("pending")
        assert "Boss: approve?" in out, out
        a.ctl("approve", tc["id"], "--by", "boss")
        wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 30, "the turn after the approval")
        res = of_type(a, c, "resolution")
        assert len(res) == 1 and res[0]["content"]["result"] == {"approved": True}, res
        assert res[0]["content"]["by"] == {"uid": os.getuid(), "name": "boss"}, res
    finally:
        a.close()


def test_bad_on_expiry_is_refused():
    cases = [
        ("[tool.t]\nexecutor = human\non_expiry = maybe\n", "bad value 'maybe' for 'on_expiry' in [tool.t]"),
        ("[tool.t]\ncommand = true\non_expiry = deny\n", "[tool.t] on_expiry is for human tools (executor = human)"),
        ("[tool.t]\nexecutor = human\nexpires = 0\non_expiry = approve\n",
         "[tool.t] on_expiry = approve needs an expiry: expires is 0 (never)"),
        ("[tool.t]\nexecutor = human\non_expiry = escalate\n",
         "[tool.t] on_expiry = escalate needs escalate_to (a human tool)"),
        ("[tool.t]\nexecutor = human\non_expiry = escalate\nescalate_to = nope\n",
         "[tool.t] escalate_to = nope names no human tool of the configuration"),
        ("[tool.t]\nexecutor = human\non_expiry = escalate\nescalate_to = s\n[tool.s]\ncommand = true\n",
         "[tool.t] escalate_to = s names no human tool of the configuration"),
        ("[tool.t]\nexecutor = human\non_expiry = escalate\nescalate_to = t\n",
         "[tool.t] escalate_to names the tool itself"),
        ("[tool.t]\nexecutor = human\nescalate_to = u\n[tool.u]\nexecutor = human\n",
         "[tool.t] escalate_to is for on_expiry = escalate"),
        ("[tool.t]\nexecutor = human\nescalate_to = bad name!\n", "bad value 'bad name!' for 'escalate_to' in [tool.t]"),
        ("[mcp.s]\ncommand = true\non_expiry = deny\n", "unknown key 'on_expiry' in [mcp.s]"),
    ]
    for text, msg in cases:
        harness.config_refused(text, msg)
    harness.config_starts("[tool.t]\nexecutor = human\non_expiry = expire\n")


harness.main(globals())
