"""agentd-worker end to end (docs/protocol.md "Semantics", docs/configuration.md): scripted models and tools
named in the configuration, driven through the real agentd. One driver model script serves every test; its
behaviour comes from its command line (fail_first=N, fail_always, sleep=S, garbage, nofinal) and from what the
user sends (an object {"calls": [...]} asks for those tool calls; {"gate": NAME} makes the model wait for the
file DIR/NAME). Every request a model receives is logged, with the final line it printed, so tests compare
exactly what the worker rendered and what it recorded."""
import json
import os
import signal
import time

import harness
from harness import Agentd, wait_for, pid_alive

# The driver model. Logs every request (DIR/requests.jsonl) before acting, and every final it prints
# (DIR/finals.jsonl), one JSON object a line, tagged with the conversation and the model's argv.
DRIVER = r'''
import json, os, sys, time
DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
opts = dict(a.split("=", 1) if "=" in a else (a, "1") for a in sys.argv[1:])
req = json.load(sys.stdin)
conv = req.get("conversation")
def log(name, rec):
    with open(os.path.join(DIR, name), "a") as f:
        f.write(json.dumps(rec) + "\n")
def count():
    n = 0
    with open(os.path.join(DIR, "requests.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            n += r["conv"] == conv and r["model"] == opts.get("name")
    return n
log("requests.jsonl", {"conv": conv, "model": opts.get("name"), "env": os.environ.get("AGENTD_CONVERSATION"),
                       "pid": os.getpid(), "req": req})
n = count()
def final(text, calls=()):
    usage = {"input_tokens": 100 + n, "output_tokens": 10 * n, "cost": 0.125}
    out = {"text": text, "tool_calls": list(calls), "usage": usage}
    log("finals.jsonl", {"conv": conv, "model": opts.get("name"), "final": out})
    print(json.dumps({"delta": text[:5]}), flush=True)
    print(json.dumps(out), flush=True)
    sys.exit(0)
if "sleep" in opts:
    time.sleep(float(opts["sleep"]))
if "fail_always" in opts or n <= int(opts.get("fail_first", 0)):
    sys.stderr.write("model failure %d\n" % n)
    if "stderr_hex" in opts:  # bytes that are not UTF-8, or a text the message cuts mid-character
        sys.stderr.flush()
        sys.stderr.buffer.write(bytes.fromhex(opts["stderr_hex"]) * int(opts.get("stderr_times", "1")))
    sys.exit(3)
if "huge_usage" in opts:  # totals past what JSON can show, after two turns
    print(json.dumps({"text": "expensive", "usage": {"input_tokens": 2**63 - 1, "output_tokens": 2**63 - 1,
                                                     "cost": 1e308}}), flush=True)
    sys.exit(0)
if "garbage" in opts:
    print("this is not JSON", flush=True)
    sys.exit(0)
if "nofinal" in opts:
    print(json.dumps({"delta": "half an answer"}), flush=True)
    sys.exit(0)
if "after_final" in opts:
    print(json.dumps({"text": "final"}), flush=True)
    print(json.dumps({"delta": "after the final"}), flush=True)
    sys.exit(0)
if "wide" in opts:  # one delta of ~90 KB of 3-byte characters: longer than an IPC message
    print(json.dumps({"delta": "a" + "\u20ac" * 30000}), flush=True)
    final("after a wide delta")
if "deepargs" in opts:  # a tool call whose args nest deepargs levels of objects
    deep = {}
    for _ in range(int(opts["deepargs"]) - 1):
        deep = {"k": deep}
    final("deep", [{"name": "add", "args": deep}])
msgs = req["messages"]
if req["task"] == "summarize":
    final("SUMMARY(%s)" % ",".join(str(m["seq"]) for m in msgs))
# What the last turn did not see: events after its context_seq (queued messages come before it in seq).
ctx = max([m["content"]["context_seq"] for m in msgs if m["type"] == "assistant_msg"], default=0)
new = [m for m in msgs if m["seq"] > ctx]
users = [m["content"] for m in new if m["type"] == "user_msg"]
for u in users:
    if u.get("gate"):
        t0 = time.time()
        while not os.path.exists(os.path.join(DIR, u["gate"])) and time.time() - t0 < 60:
            time.sleep(0.02)
if users and users[-1].get("calls") is not None:
    final("calling", users[-1]["calls"])
results = [(m["content"]["tool_call_id"], m["content"]["status"]) for m in new
           if m["type"] in ("tool_result", "resolution")]
final("answer: " + " + ".join(u.get("text", "?") for u in users) + (" results: %s" % results if results else ""))
'''

# A server tool driven by its args: {"gate": FILE, "sleep": S, "exit": N, "stderr": TEXT, "spew": MB, "echo": V}.
TOOL = r'''
import json, os, sys, time
DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
raw = sys.stdin.read()
d = json.loads(raw)
rec = {"stdin": raw, "pid": os.getpid(), "pgid": os.getpgid(0),
       "env": {k: os.environ.get(k) for k in ("AGENTD_TOOL_CALL_ID", "AGENTD_CONVERSATION")}}
with open(os.path.join(DIR, "tools.jsonl"), "a") as f:
    f.write(json.dumps(rec) + "\n")
a = d["args"]
if a.get("gate"):
    t0 = time.time()
    while not os.path.exists(os.path.join(DIR, a["gate"])) and time.time() - t0 < 60:
        time.sleep(0.02)
if a.get("sleep"):
    time.sleep(a["sleep"])
if a.get("stderr"):
    sys.stderr.write(a["stderr"])
if a.get("stderr_hex"):
    sys.stderr.flush()
    sys.stderr.buffer.write(bytes.fromhex(a["stderr_hex"]))
if a.get("spew"):
    chunk = b"x" * (1 << 20)
    for _ in range(a["spew"]):
        sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
if a.get("exit"):
    sys.exit(a["exit"])
if "nest" in a:  # JSON arrays nested that deep, as the tool's whole output
    print("[" * a["nest"] + "]" * a["nest"])
elif "echo" in a:
    print(json.dumps({"echo": a["echo"], "id": d["tool_call_id"], "env": rec["env"]}))
else:
    print(json.dumps({"sum": a.get("a", 0) + a.get("b", 0)}))
'''

MODELS = {
    "m": "",
    "flaky": "fail_first=2",
    "dead": "fail_always",
    "slow": "sleep=30",
    "garbage": "garbage",
    "nofinal": "nofinal",
    "late": "after_final",
    "wide": "wide",
    "deep64": "deepargs=64",
    "deep65": "deepargs=65",
}


def agentd(agentd_section="", models=None, extra=""):
    """An Agentd (not started) with the driver model under several names, the tool script, and config."""
    a = Agentd(start=False)
    drv = a.script("driver.py", DRIVER)
    tool = a.script("tool.py", TOOL)
    cfg = ["[agentd]", agentd_section]
    for name, args in (models or MODELS).items():
        cfg.append(f"[model.{name}]\ncommand = {drv} name={name} {args}")
        if name == "slow":
            cfg.append("timeout = 1s\nretries = 1")
        elif name == "patient":  # past 2^31 ms: was cast to int, and wrapped to about 1 s
            cfg.append("timeout = 4294968.296\nretries = 0")
        elif name in ("garbage", "nofinal", "late", "deep65"):
            cfg.append("retries = 0")
    cfg.append(f"""
[tool.add]
executor = server
command = {tool}
description = Adds a and b.
[tool.work]
executor = server
command = {tool}
timeout = 1s
description = Does work.
[tool.ask]
executor = human
prompt = May I?
expires = 1h
description = Ask a person.
[tool.hurry]
executor = human
prompt = Quick!
expires = 1s
[tool.soon]
executor = human
prompt = Soon!
expires = {int(harness.scaled(5) * 1000)}ms
[tool.secret]
executor = server
command = {tool}
[tool.patient]
executor = server
command = {tool}
timeout = 4294968.296
""" + extra)
    a.write_config("\n".join(cfg))
    a.start()
    return a


def jsonl(a, name):
    try:
        with open(os.path.join(a.dir, name)) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


def requests(a, conv, model=None):
    """The requests the driver model received for conv (in order)."""
    return [r["req"] for r in jsonl(a, "requests.jsonl") if r["conv"] == conv and (model is None or r["model"] == model)]


def finals(a, conv):
    return [r["final"] for r in jsonl(a, "finals.jsonl") if r["conv"] == conv]


def types(a, c):
    return [e["type"] for e in a.events(c)]


def get(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]


def status(a, c):
    return get(a, c)["status"]


def wait_idle(a, c, n_events=None, timeout=20):
    """Wait until the conversation is idle with no live turn, (and holds n_events events)."""
    def done():
        g = get(a, c)
        if g["status"] != "idle":
            return False
        if n_events is not None and g["last_seq"] != n_events:
            return False
        return True
    wait_for(done, timeout, f"{c} idle" + (f" with {n_events} events" if n_events else ""))


def by_type(a, c, ty):
    return [e for e in a.events(c) if e["type"] == ty]


def msg_view(m):
    return (m["seq"], m["type"], m["content"])


def call(name, id=None, **args):
    c = {"name": name, "args": args}
    if id is not None:
        c["id"] = id
    return c


def touch(a, name):
    with open(os.path.join(a.dir, name), "w"):
        pass


# ------------------------------------------------------------------------------------------------------
# Turns


def test_text_turn_renders_the_request():
    with agentd() as a:
        settings = {"model": "m", "system": "You are terse.", "tools": ["add", "ask"],
                    "params": {"temperature": 0.5, "stop": ["\n"]}}
        c = a.create(settings=settings)
        w = a.watch(c)
        assert a.send(c, "hi") == 1
        deltas, assistant = [], None
        deadline = time.monotonic() + harness.scaled(20)
        while assistant is None and time.monotonic() < deadline:
            line = w.recv(timeout=20)
            if "delta" in line:
                deltas.append(line["delta"]["text"])
            elif line.get("event", {}).get("type") == "assistant_msg":
                assistant = line["event"]
        w.close()
        assert assistant["content"] == {"text": "answer: hi", "context_seq": 1}, assistant
        assert "answe" in deltas, deltas
        wait_idle(a, c, 2)
        reqs = requests(a, c)
        assert len(reqs) == 1, reqs
        r = reqs[0]
        assert r["task"] == "turn" and r["conversation"] == c and r["turn"] == 1, r
        assert r["system"] == "You are terse." and r["summary"] is None, r
        assert r["messages"] == [{"seq": 1, "type": "user_msg", "content": {"text": "hi"}}], r
        assert r["tools"] == [{"name": "add", "description": "Adds a and b.", "executor": "server"},
                              {"name": "ask", "description": "Ask a person.", "executor": "human"}], r["tools"]
        assert r["params"] == settings["params"], r
        assert jsonl(a, "requests.jsonl")[0]["env"] == c  # AGENTD_CONVERSATION for models too
        # The next turn sees every event since (no summary): the whole history.
        a.send(c, {"text": "again", "extra": 1})
        wait_idle(a, c, 4)
        r = requests(a, c)[1]
        assert [msg_view(m) for m in r["messages"]] == [
            (1, "user_msg", {"text": "hi"}), (2, "assistant_msg", {"text": "answer: hi", "context_seq": 1}),
            (3, "user_msg", {"text": "again", "extra": 1})], r["messages"]
        assert r["turn"] == 3
        assert a.events(c)[3]["content"] == {"text": "answer: again", "context_seq": 3}


def test_queued_messages_answered_by_one_turn():
    with agentd() as a:
        c = a.create(settings={"model": "m"})
        a.send(c, {"text": "first", "gate": "go"})
        wait_for(lambda: requests(a, c), 10, "the first model call")
        # Sent while the first turn runs: answered together by the next one.
        a.send(c, "second")
        a.send(c, "third")
        touch(a, "go")
        wait_idle(a, c, 5)
        ev = a.events(c)
        assert [e["type"] for e in ev] == ["user_msg"] * 3 + ["assistant_msg"] * 2, ev
        assert ev[3]["content"] == {"text": "answer: first", "context_seq": 1}, ev[3]
        assert ev[4]["content"] == {"text": "answer: second + third", "context_seq": 4}, ev[4]
        reqs = requests(a, c)
        assert len(reqs) == 2, reqs
        assert [m["seq"] for m in reqs[1]["messages"]] == [1, 2, 3, 4]


def metric(a, name):
    text = a.ok({"op": "metrics"})["text"]
    line = [l for l in text.splitlines() if l.startswith(name + " ")]
    assert len(line) == 1, (name, text[:2000])
    return int(line[0].split()[1])


def test_wakes_coalesce_while_a_turn_runs():
    """Events for a worker that has not re-read the log since its last wake need no wake of their own: one
    wake covers them, the worker's woken brings one more, and every message is answered."""
    with agentd() as a:
        c = a.create(settings={"model": "m"})
        a.send(c, {"text": "first", "gate": "go"})
        wait_for(lambda: requests(a, c), 10, "the first model call")
        wakes0, coalesced0 = metric(a, "agentd_worker_wakes_total"), metric(a, "agentd_worker_wakes_coalesced_total")
        for i in range(20):
            a.send(c, f"m{i}")
        wakes1, coalesced1 = metric(a, "agentd_worker_wakes_total"), metric(a, "agentd_worker_wakes_coalesced_total")
        # The model call watches the socket and reads the first wake; the other 19 ride on it.
        assert wakes1 - wakes0 == 1, (wakes0, wakes1)
        assert coalesced1 - coalesced0 == 19, (coalesced0, coalesced1)
        touch(a, "go")
        wait_idle(a, c, 23)
        ev = a.events(c)
        assert ev[-1]["type"] == "assistant_msg", ev[-1]
        assert ev[-1]["content"]["text"] == "answer: " + " + ".join(f"m{i}" for i in range(20)), ev[-1]
        # Idle again: the next event is announced by a wake of its own.
        w = metric(a, "agentd_worker_wakes_total")
        a.send(c, "after")
        wait_idle(a, c, 25)
        assert metric(a, "agentd_worker_wakes_total") == w + 1


def test_waiting_worker_lets_go_of_the_store():
    """A worker left waiting (idle, or awaiting a person) closes the store after a moment: no mapping of it and no
    descriptor for it, so commits need not visit its map; the next event finds the same process, which opens the
    store again and answers."""
    def holds_store(pid):
        with open(f"/proc/{pid}/maps") as f:
            mapped = "data.mdb" in f.read()
        fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        if harness.PG:  # its connections: sockets besides its IPC socket (3)
            return any(x.startswith("socket:") for fd, x in fds.items() if fd != 3)
        return mapped or any(x.endswith(".mdb") for x in fds.values())
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["ask"]})
        a.send(c, "hi")
        wait_idle(a, c, 2)
        pid = a.worker_pid(c)
        assert pid
        wait_for(lambda: not holds_store(pid), 10, "the idle worker letting go of the store")
        a.send(c, {"calls": [call("ask")]})
        wait_for(lambda: status(a, c) == "suspended", 10, "awaiting a person")
        assert a.worker_pid(c) == pid
        wait_for(lambda: not holds_store(pid), 10, "the waiting worker letting go of the store")
        tc = by_type(a, c, "tool_call")[0]["content"]["tool_call_id"]
        a.ok({"op": "resolve", "tool_call_id": tc, "result": {"yes": True}})
        wait_idle(a, c, 8)
        assert types(a, c)[-2:] == ["resolution", "assistant_msg"], types(a, c)
        assert a.worker_pid(c) == pid
        assert by_type(a, c, "assistant_msg")[-1]["content"]["text"].startswith("answer:")


def test_several_tool_calls_in_one_turn():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        calls = [call("add", a=1, b=2), call("add", a=10, b=20), call("add", a=100, b=200)]
        a.send(c, {"calls": calls})
        wait_idle(a, c, 9)
        ev = a.events(c)
        assert [e["type"] for e in ev] == ["user_msg", "assistant_msg"] + ["tool_call"] * 3 + ["tool_result"] * 3 + [
            "assistant_msg"], ev
        ids = [e["content"]["tool_call_id"] for e in ev[2:5]]
        assert len(set(ids)) == 3
        assert [e["content"]["args"] for e in ev[2:5]] == [{"a": 1, "b": 2}, {"a": 10, "b": 20}, {"a": 100, "b": 200}]
        assert all(e["content"]["executor"] == "server" and e["content"]["name"] == "add" for e in ev[2:5])
        res = {e["content"]["tool_call_id"]: e["content"] for e in ev[5:8]}
        assert set(res) == set(ids)
        for i, want in zip(ids, (3, 30, 300)):
            assert res[i]["status"] == "resolved" and res[i]["result"] == {"sum": want}, res[i]
        # One follow-up turn, seeing every result.
        reqs = requests(a, c)
        assert len(reqs) == 2, reqs
        assert [m["type"] for m in reqs[1]["messages"][-3:]] == ["tool_result"] * 3
        assert ev[8]["content"]["context_seq"] == 8
        rows = a.ok({"op": "tool_calls", "conversation": c})["tool_calls"]
        assert sorted(r["id"] for r in rows) == sorted(ids) and all(r["status"] == "resolved" for r in rows), rows


def test_server_and_human_tools_mixed():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add", "ask"]})
        a.send(c, {"calls": [call("add", a=2, b=3), call("ask", q="ok?")]})
        wait_for(lambda: status(a, c) == "suspended" and by_type(a, c, "tool_result"), 20,
                 "suspended, with the server tool's result")
        ev = a.events(c)
        tc = {e["content"]["name"]: e["content"] for e in ev if e["type"] == "tool_call"}
        assert tc["ask"]["executor"] == "human" and tc["add"]["executor"] == "server", tc
        assert by_type(a, c, "suspension")[0]["content"] == {"tool_call_id": tc["ask"]["tool_call_id"],
                                                             "prompt": "May I?"}
        r = by_type(a, c, "tool_result")
        assert len(r) == 1 and r[0]["content"]["result"] == {"sum": 5} and r[0]["content"]["status"] == "resolved"
        g = get(a, c)
        assert g["fsm_state"]["state"] == "awaiting_input", g
        assert list(g["fsm_state"]["pending"]) == [tc["ask"]["tool_call_id"]], g
        pend = a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]
        assert [p["id"] for p in pend] == [tc["ask"]["tool_call_id"]], pend
        # No turn while a call is unsettled.
        time.sleep(0.2)
        assert len(requests(a, c)) == 1 and status(a, c) == "suspended"
        a.ok({"op": "resolve", "tool_call_id": tc["ask"]["tool_call_id"], "result": "yes"})
        wait_for(lambda: types(a, c)[-1] == "assistant_msg" and status(a, c) == "idle", 20, "the follow-up turn")
        assert len(requests(a, c)) == 2
        last = a.events(c)[-1]["content"]["text"]
        assert "'resolved'" in last and tc["ask"]["tool_call_id"] in last and tc["add"]["tool_call_id"] in last, last


def test_mixed_turn_suspended_as_soon_as_its_suspension_is_visible():
    """docs/protocol.md, "Semantics": a suspension visible means the call is pending and the status is
    suspended, even while the same turn's server call still runs."""
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add", "ask"]})
        a.send(c, {"calls": [call("add", gate="go1", a=1, b=1), call("ask")]})
        wait_for(lambda: by_type(a, c, "suspension"), 10, "the suspension")
        g = get(a, c)
        assert g["status"] == "suspended", g
        assert not by_type(a, c, "tool_result")  # the server call is still running
        touch(a, "go1")
        wait_for(lambda: by_type(a, c, "tool_result"), 10, "the server result")
        assert status(a, c) == "suspended"
        ask = [e["content"]["tool_call_id"] for e in by_type(a, c, "tool_call") if e["content"]["name"] == "ask"][0]
        a.ok({"op": "resolve", "tool_call_id": ask})
        wait_idle(a, c, 8)
        assert len(requests(a, c)) == 2
        # The person answers first, the server call finishes later: one follow-up turn, then idle.
        c2 = a.create(settings={"model": "m", "tools": ["add", "ask"]})
        a.send(c2, {"calls": [call("add", gate="go2", a=1, b=1), call("ask")]})
        wait_for(lambda: by_type(a, c2, "suspension"), 10, "the suspension")
        ask = [e["content"]["tool_call_id"] for e in by_type(a, c2, "tool_call") if e["content"]["name"] == "ask"][0]
        a.ok({"op": "resolve", "tool_call_id": ask})
        time.sleep(0.2)
        assert len(requests(a, c2)) == 1, "a turn ran before the server call was settled"
        touch(a, "go2")
        wait_idle(a, c2, 8)
        assert types(a, c2)[-1] == "assistant_msg" and len(requests(a, c2)) == 2
        assert get(a, c2)["fsm_state"]["state"] == "idle"


def test_model_id_kept_when_unused_minted_when_reused():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("add", id="model-id-1", a=1, b=1), call("add", id="model-id-1", a=2, b=2)]})
        wait_idle(a, c, 7)
        ids = [e["content"]["tool_call_id"] for e in by_type(a, c, "tool_call")]
        assert ids[0] == "model-id-1" and ids[1] != "model-id-1", ids  # repeated in one reply
        a.send(c, {"calls": [call("add", id="model-id-1", a=3, b=3), call("add", id="model-id-2", a=4, b=4)]})
        wait_idle(a, c, 14)
        ids2 = [e["content"]["tool_call_id"] for e in by_type(a, c, "tool_call")][2:]
        assert ids2[0] not in ("model-id-1", ids[1]) and ids2[1] == "model-id-2", ids2
        # Another conversation cannot reuse it either: ids are unique across the store.
        c2 = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c2, {"calls": [call("add", id="model-id-2", a=5, b=5)]})
        wait_idle(a, c2, 5)
        id3 = by_type(a, c2, "tool_call")[0]["content"]["tool_call_id"]
        assert id3 != "model-id-2", id3
        assert a.ok({"op": "tool_call", "tool_call_id": "model-id-2"})["tool_call"]["conversation"] == c
        assert a.ok({"op": "tool_call", "tool_call_id": id3})["tool_call"]["result"] == {"sum": 10}


def test_unknown_tool_settled_errored():
    with agentd() as a:
        # "secret" is configured but not one of this conversation's tools; "nope" is not configured at all.
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("nope", x=1), call("secret", a=1, b=1)]})
        wait_idle(a, c, 7)
        res = by_type(a, c, "tool_result")
        assert len(res) == 2 and all(r["content"]["status"] == "errored" for r in res), res
        assert all("unknown tool" in json.dumps(r["content"]["result"]) for r in res), res
        assert not jsonl(a, "tools.jsonl"), "a tool the conversation may not use was run"
        assert types(a, c)[-1] == "assistant_msg" and len(requests(a, c)) == 2


def test_human_call_expires():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["hurry"]})
        a.send(c, {"calls": [call("hurry")]})
        # The call, not "suspended": on a loaded machine its 1 s may be over before a poll sees that state.
        tcid = wait_for(lambda: by_type(a, c, "tool_call"), 10, "the call")[0]["content"]["tool_call_id"]
        wait_for(lambda: by_type(a, c, "resolution"), 10, "the expiry")
        r = by_type(a, c, "resolution")[0]["content"]
        assert r["tool_call_id"] == tcid and r["status"] == "expired", r
        wait_for(lambda: types(a, c)[-1] == "assistant_msg" and status(a, c) == "idle", 10, "the follow-up turn")
        assert a.ok({"op": "tool_call", "tool_call_id": tcid})["tool_call"]["status"] == "expired"
        assert a.request({"op": "resolve", "tool_call_id": tcid})["error"] == "stale"
        assert "'expired'" in a.events(c)[-1]["content"]["text"]


# ------------------------------------------------------------------------------------------------------
# Model failures


def test_model_fails_twice_then_succeeds():
    with agentd() as a:
        c = a.create(settings={"model": "flaky"})
        a.send(c, "hello")
        wait_idle(a, c, 2)
        assert types(a, c) == ["user_msg", "assistant_msg"]
        assert len(requests(a, c)) == 3
        assert a.events(c)[1]["content"] == {"text": "answer: hello", "context_seq": 1}
        # Usage is counted for the call that answered only.
        u = get(a, c)["usage"]
        assert (u["input_tokens"], u["output_tokens"]) == (103, 30), u


def test_model_always_fails_then_owes_nothing():
    with agentd() as a:
        c = a.create(settings={"model": "dead"})
        a.send(c, "hello")
        wait_idle(a, c, 2)
        ev = a.events(c)
        assert ev[1]["type"] == "error", ev
        e = ev[1]["content"]
        assert e["attempts"] == 3 and e["context_seq"] == 1, e
        assert "model failure" in e["message"] or "status 3" in e["message"], e
        assert len(requests(a, c)) == 3
        # Owes nothing: a stop and a restart of agentd do not run the model again.
        a.ok({"op": "stop", "conversation": c})
        wait_for(lambda: a.worker_pid(c) is None, 10, "the worker to stop")
        a.restart()
        time.sleep(0.3)
        assert len(requests(a, c)) == 3 and get(a, c)["last_seq"] == 2
        # A new user_msg is answered (and the model still fails: a second error, no more).
        a.send(c, "again")
        wait_idle(a, c, 4)
        ev = a.events(c)
        assert ev[3]["type"] == "error" and ev[3]["content"]["context_seq"] == 3, ev
        assert len(requests(a, c)) == 6
        assert [m["seq"] for m in requests(a, c)[-1]["messages"]] == [1, 2, 3]


def test_model_timeout_retried_then_error():
    with agentd() as a:
        c = a.create(settings={"model": "slow"})
        t0 = time.monotonic()
        a.send(c, "hello")
        wait_idle(a, c, 2)
        e = a.events(c)[1]
        assert e["type"] == "error" and e["content"]["attempts"] == 2, e
        assert "timed out" in e["content"]["message"], e
        # The attempts are counted from the error event: a model killed by its 1 s timeout on a loaded machine
        # may not have started far enough to log its request, so the log only bounds them.
        assert len(requests(a, c)) <= 2, requests(a, c)
        assert time.monotonic() - t0 >= 2.0  # two timeouts of 1 s each passed: a lower bound only
        # The sleeping models are gone with their timeouts.
        for r in jsonl(a, "requests.jsonl"):
            wait_for(lambda: not pid_alive(r["pid"]), 5, f"model {r['pid']} to be gone")


def test_bad_model_output_is_an_error():
    with agentd() as a:
        c1 = a.create(settings={"model": "garbage"})
        c2 = a.create(settings={"model": "nofinal"})
        a.send(c1, "x")
        a.send(c2, "y")
        wait_idle(a, c1, 2)
        wait_idle(a, c2, 2)
        e1, e2 = a.events(c1)[1], a.events(c2)[1]
        assert e1["type"] == "error" and e1["content"]["attempts"] == 1, e1
        assert e2["type"] == "error" and "final" in e2["content"]["message"], e2
        assert a.ok({"op": "ping"})


# ------------------------------------------------------------------------------------------------------
# Server tools


def test_tool_nonzero_exit_errored_with_status_and_stderr():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("add", exit=7, stderr="x" * 10000 + "the real reason\n")]})
        wait_idle(a, c, 5)
        r = by_type(a, c, "tool_result")[0]["content"]
        assert r["status"] == "errored" and r["result"]["exit_status"] == 7, r
        assert r["result"]["stderr"].endswith("the real reason\n") and len(r["result"]["stderr"]) <= 8192, r
        assert a.ok({"op": "tool_call", "tool_call_id": r["tool_call_id"]})["tool_call"]["status"] == "errored"


def test_text_from_outside_that_is_not_utf8_is_kept_readable():
    # A tool's stderr tail, or a model's error quoting its stderr, cut mid-character or not UTF-8 at all:
    # json_pack refused it, the event was stored as null, and the log's tail could never be got past (every
    # revival exited "the log's tail holds a malformed event", then the crash limit, for good).
    models = {"m": "", "bad": "fail_always stderr_hex=ff20fe", "cut": "fail_always stderr_hex=e282ac stderr_times=300"}
    with agentd(models=models) as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("add", exit=3, stderr_hex="626164ff20fe"), call("add", exit=2, stderr="\u20ac" * 5001)]})
        wait_idle(a, c, 7)
        res = {r["content"]["tool_call_id"]: r["content"] for r in by_type(a, c, "tool_result")}
        first, second = (res[i] for i in sorted(res, key=lambda i: [e["content"].get("tool_call_id")
                                                                     for e in by_type(a, c, "tool_call")].index(i)))
        assert first["status"] == "errored" and first["result"]["stderr"] == "bad\ufffd \ufffd", first
        tail = second["result"]["stderr"]  # the last 4 KiB, cut inside a character at its start
        assert second["status"] == "errored" and tail.strip("\u20ac") == "\ufffd", tail[:10]
        assert types(a, c)[-1] == "assistant_msg", types(a, c)  # the turn after the results ran
        for m in ("bad", "cut"):
            d = a.create(settings={"model": m})
            a.send(d, "one")
            wait_idle(a, d, 2)
            err = a.events(d)[1]["content"]
            assert err["attempts"] >= 1 and "\ufffd" in err["message"], err
            a.send(d, "two")  # the conversation goes on: a second error, not a crash loop
            wait_idle(a, d, 4)
            assert types(a, d) == ["user_msg", "error", "user_msg", "error"], types(a, d)
        assert "malformed" not in a.log() and "crashed" not in a.log(), a.log()


def test_a_tool_call_name_the_store_cannot_keep_is_a_failed_attempt():
    # A name over 128 bytes passed the model protocol's check and failed the turn's commit: the worker exited,
    # was restarted, called the model again (billed each time), and ended in the crash limit.
    with agentd(models={"m": ""}) as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("x" * 129)]})
        wait_idle(a, c, 2)
        err = a.events(c)[1]
        assert err["type"] == "error" and "name must be at most 128 bytes" in err["content"]["message"], err
        assert len(requests(a, c)) == err["content"]["attempts"], (len(requests(a, c)), err)
        a.send(c, {"calls": [call("y" * 128)]})  # 128 bytes: kept, settled as an unknown tool
        wait_idle(a, c, 7)
        r = by_type(a, c, "tool_result")[0]["content"]
        assert r["status"] == "errored" and "unknown tool" in json.dumps(r["result"]), r
        assert "exited with status" not in a.log() and "crashed" not in a.log(), a.log()


def test_usage_totals_saturate():
    # Two turns of usage {2^63-1 tokens, cost 1e308} made the cost infinite (get and list then failed with
    # "internal: out of memory": JSON has no infinity) and the tokens wrap to -2.
    with agentd(models={"rich": "huge_usage"}) as a:
        c = a.create(settings={"model": "rich"})
        a.send(c, "one")
        wait_idle(a, c, 2)
        a.send(c, "two")
        wait_idle(a, c, 4)
        u = get(a, c)["usage"]
        assert u == {"input_tokens": 2**63 - 1, "output_tokens": 2**63 - 1, "cost": 1.7976931348623157e308, "turns": 2}, u
        assert [x["id"] for x in a.ok({"op": "list"})["conversations"]] == [c]


def test_timeouts_past_24_days_are_honoured():
    # A timeout over 2^31 ms was cast to int: 4294968.296 s became about 1 s, and the call was killed.
    with agentd(models={"m": "", "patient": "sleep=1.5"}) as a:
        c = a.create(settings={"model": "patient"})
        a.send(c, "take your time")
        wait_idle(a, c, 2, timeout=30)
        assert a.events(c)[1]["type"] == "assistant_msg", a.events(c)
        d = a.create(settings={"model": "m", "tools": ["patient"]})
        a.send(d, {"calls": [call("patient", sleep=1.5, a=1, b=2)]})
        wait_idle(a, d, 5, timeout=30)
        r = by_type(a, d, "tool_result")[0]["content"]
        assert r["status"] == "resolved" and r["result"] == {"sum": 3}, r


def test_tool_timeout():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["work"]})
        a.send(c, {"calls": [call("work", sleep=60)]})
        wait_idle(a, c, 5, timeout=20)
        r = by_type(a, c, "tool_result")[0]["content"]
        assert r["status"] == "errored" and "timed out" in r["result"]["error"], r
        # A tool killed by its 1 s timeout before it logged itself (a loaded machine) leaves no pid to check.
        for rec in jsonl(a, "tools.jsonl"):
            wait_for(lambda: not pid_alive(rec["pid"]), 5, "the timed-out tool to be gone")


def test_tool_huge_output_capped():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("add", spew=50)]})
        wait_idle(a, c, 5, timeout=30)
        r = by_type(a, c, "tool_result")[0]["content"]
        assert r["status"] == "errored" and "output over" in r["result"]["error"], r
        assert len(json.dumps(r)) < 100000
        # Both still fine: another turn works on the same worker.
        pid = a.worker_pid(c)
        a.send(c, "still there?")
        wait_idle(a, c, 7)
        assert a.events(c)[-1]["content"]["text"] == "answer: still there?"
        assert pid is None or a.worker_pid(c) in (pid, None)
        assert a.ok({"op": "ping"})


def test_tool_environment_and_stdin():
    with agentd() as a:
        c = a.create(conversation="conv.env-1", settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("add", id="env-call-1", echo={"k": [1, 2]})]})
        wait_idle(a, c, 5)
        rec = jsonl(a, "tools.jsonl")[0]
        assert rec["env"] == {"AGENTD_TOOL_CALL_ID": "env-call-1", "AGENTD_CONVERSATION": c}, rec
        stdin = json.loads(rec["stdin"])
        assert stdin == {"tool_call_id": "env-call-1", "name": "add", "args": {"echo": {"k": [1, 2]}},
                         "conversation": c, "attempt": 1}, stdin
        assert rec["stdin"].endswith("\n")
        assert rec["pgid"] == rec["pid"], rec  # its own process group
        r = by_type(a, c, "tool_result")[0]["content"]
        assert r == {"tool_call_id": "env-call-1", "status": "resolved",
                     "result": {"echo": {"k": [1, 2]}, "id": "env-call-1", "env": rec["env"]}}, r


# ------------------------------------------------------------------------------------------------------
# Compaction, usage, audit, stop


def test_compaction_then_revival_reads_after_summary():
    with agentd("compact_events = 10\ncompact_keep = 4\naudit = on") as a:
        c = a.create(settings={"model": "m", "system": "sys"})
        for i in range(6):
            a.send(c, f"m{i}")
            wait_idle(a, c, 2 * i + 2)
        # 12 events > 10: the oldest part, up to last_seq - keep (never past the last turn), is summarised.
        s = wait_for(lambda: a.ok({"op": "summary", "conversation": c})["summary"], 10, "a summary")
        assert (s["from_seq"], s["to_seq"]) == (1, 8), s
        assert s["content"] == {"text": "SUMMARY(1,2,3,4,5,6,7,8)"}, s
        sreq = requests(a, c)[-1]
        assert sreq["task"] == "summarize" and [m["seq"] for m in sreq["messages"]] == list(range(1, 9)), sreq
        assert len(a.events(c)) == 12  # the log is untouched
        pid = a.worker_pid(c)
        if pid:
            a.ok({"op": "kill", "conversation": c})
            wait_for(lambda: not pid_alive(pid) and a.worker_pid(c) is None, 10, "the worker to die")
        a.send(c, "after")
        wait_idle(a, c, 14)
        r = requests(a, c)[-1]
        assert r["task"] == "turn" and r["summary"] is not None, r
        assert (r["summary"]["from_seq"], r["summary"]["to_seq"], r["summary"]["content"]) == (
            1, 8, {"text": "SUMMARY(1,2,3,4,5,6,7,8)"}), r["summary"]
        assert [m["seq"] for m in r["messages"]] == [9, 10, 11, 12, 13], r["messages"]
        assert r["turn"] == 13
        assert a.events(c)[-1]["content"] == {"text": "answer: after", "context_seq": 13}
        # The summarize call is a model call like any other: usage counted once, audited with what it was given.
        fs = finals(a, c)
        assert len(fs) == 8
        u = get(a, c)["usage"]
        assert (u["input_tokens"], u["output_tokens"], u["cost"]) == (
            sum(f["usage"]["input_tokens"] for f in fs), sum(f["usage"]["output_tokens"] for f in fs), 1.0), u
        rows = a.ok({"op": "audit", "conversation": c})["model_calls"]
        assert len(rows) == 8, rows
        summ = [r for r in rows if r["task"] == "summarize"]
        assert len(summ) == 1 and summ[0]["turn_ref"] == 8, summ  # keyed by the summary's to_seq
        assert sorted(json.dumps(r["rendered_context"], sort_keys=True) for r in rows) == sorted(
            json.dumps(r, sort_keys=True) for r in requests(a, c))
        last = [r for r in rows if r["rendered_context"] == requests(a, c)[-1]]
        assert len(last) == 1 and last[0]["summary_version"] == s["version"] and last[0]["turn_ref"] == 14, last


def test_compact_op_forces_a_summary():
    with agentd() as a:
        c = a.create(settings={"model": "m"})
        for i in range(2):
            a.send(c, f"m{i}")
            wait_idle(a, c, 2 * i + 2)
        assert a.ok({"op": "summary", "conversation": c})["summary"] is None
        r = a.ok({"op": "compact", "conversation": c}, timeout=30)
        s = r["summary"]
        assert (s["from_seq"], s["to_seq"]) == (1, 3) and s["content"] == {"text": "SUMMARY(1,2,3)"}, r
        assert a.ok({"op": "summary", "conversation": c})["summary"]["to_seq"] == 3
        a.send(c, "m2")
        wait_idle(a, c, 6)
        assert [m["seq"] for m in requests(a, c)[-1]["messages"]] == [4, 5]


def test_usage_totals():
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, "one")
        wait_idle(a, c, 2)
        a.send(c, {"calls": [call("add", a=1, b=1)]})
        wait_idle(a, c, 7)

        def total():
            fs = finals(a, c)
            return (sum(f["usage"]["input_tokens"] for f in fs), sum(f["usage"]["output_tokens"] for f in fs),
                    sum(f["usage"]["cost"] for f in fs))

        def usage():
            u = get(a, c)["usage"]
            return (u["input_tokens"], u["output_tokens"], u["cost"])
        assert len(finals(a, c)) == 3
        assert usage() == total() == (306, 60, 0.375), (usage(), total())
        # A kill and revival does not count anything again; only the new call adds.
        pid = a.worker_pid(c)
        if pid:
            a.ok({"op": "kill", "conversation": c})
            wait_for(lambda: a.worker_pid(c) is None, 10, "the worker to die")
        a.restart()
        assert usage() == total()
        a.send(c, "two")
        wait_idle(a, c, 9)
        assert len(finals(a, c)) == 4 and usage() == total() == (410, 100, 0.5), (usage(), total())


def test_audit_on_records_each_model_call():
    with agentd("audit = on") as a:
        c = a.create(settings={"model": "m", "tools": ["add"], "params": {"t": 0.25}})
        a.send(c, "one")
        wait_idle(a, c, 2)
        a.send(c, {"calls": [call("add", a=1, b=2)]})
        wait_idle(a, c, 7)
        rows = a.ok({"op": "audit", "conversation": c})["model_calls"]
        reqs, fs = requests(a, c), finals(a, c)
        assert len(rows) == len(reqs) == 3, rows
        rows.sort(key=lambda r: r["turn_ref"])
        assert [r["turn_ref"] for r in rows] == [2, 4, 7], rows
        for row, req, f in zip(rows, reqs, fs):
            assert row["rendered_context"] == req, (row["rendered_context"], req)
            assert row["model"] == "m" and row["usage"] == f["usage"], row
            assert isinstance(row["latency_ms"], int) and 0 < row["latency_ms"] < 30000, row
            assert row["summary_version"] == 0
        c2 = a.create(settings={"model": "echo"})
        a.send(c2, "hi")
        wait_idle(a, c2, 2)
        assert len(a.ok({"op": "audit", "conversation": c2})["model_calls"]) == 1


def test_audit_off_records_nothing():
    with agentd() as a:
        c = a.create(settings={"model": "m"})
        a.send(c, "one")
        wait_idle(a, c, 2)
        assert a.ok({"op": "audit", "conversation": c})["model_calls"] == []


def test_stop_mid_turn_reruns_the_turn():
    with agentd() as a:
        c = a.create(settings={"model": "m"})
        a.send(c, {"text": "first", "gate": "go"})
        wait_for(lambda: requests(a, c), 10, "the model call")
        model_pid = jsonl(a, "requests.jsonl")[0]["pid"]
        a.ok({"op": "stop", "conversation": c})
        wait_for(lambda: a.worker_pid(c) is None, 10, "the worker to stop")
        wait_for(lambda: not pid_alive(model_pid), 5, "the model to be killed with the turn")
        assert types(a, c) == ["user_msg"] and status(a, c) == "active"
        touch(a, "go")
        a.send(c, "second")
        wait_idle(a, c, 3)
        ev = a.events(c)
        assert ev[2]["content"] == {"text": "answer: first + second", "context_seq": 2}, ev
        reqs = requests(a, c)
        assert len(reqs) == 2 and [m["seq"] for m in reqs[1]["messages"]] == [1, 2], reqs
        assert len(finals(a, c)) == 1



# ------------------------------------------------------------------------------------------------------
# What the store cannot hold as JSON, and output past the protocol


def nested(n):
    return json.loads("[" * n + "]" * n)


def test_deep_tool_output_is_kept_as_text():
    # 64 levels fit a tool_result (its result sits one level in); 65 do not, and are kept as the text
    # the tool printed. Before, they were stored as a null event that wedged the conversation.
    with agentd() as a:
        c = a.create(settings={"model": "m", "tools": ["add"]})
        a.send(c, {"calls": [call("add", nest=64), call("add", nest=65)]})
        wait_idle(a, c, 7)
        res = {e["content"]["tool_call_id"]: e["content"] for e in by_type(a, c, "tool_result")}
        calls = [e["content"]["tool_call_id"] for e in by_type(a, c, "tool_call")]
        assert res[calls[0]]["status"] == "resolved" and res[calls[0]]["result"] == nested(64), res
        assert res[calls[1]]["status"] == "resolved" and res[calls[1]]["result"] == "[" * 65 + "]" * 65, res
        tc = a.ok({"op": "tool_call", "tool_call_id": calls[1]})["tool_call"]
        assert tc["result"] == "[" * 65 + "]" * 65, tc
        assert types(a, c)[-1] == "assistant_msg"
        a.send(c, "still here")
        wait_idle(a, c, 9)
        assert a.events(c)[-1]["content"]["text"] == "answer: still here"
        assert "malformed" not in a.log()


def test_deep_model_args_fail_the_attempt():
    with agentd() as a:
        ok = a.create(settings={"model": "deep64", "tools": ["add"]})
        bad = a.create(settings={"model": "deep65", "tools": ["add"]})
        a.send(ok, "x")
        a.send(bad, "x")
        wait_for(lambda: by_type(a, ok, "tool_result"), 20, "the 64-deep call's result")
        args = by_type(a, ok, "tool_call")[0]["content"]["args"]
        depth = 0
        while args:
            args, depth = args["k"], depth + 1
        assert depth == 63, depth  # 64 objects: args and 63 inside
        wait_idle(a, bad, 2)
        e = a.events(bad)[1]
        assert e["type"] == "error" and e["content"]["attempts"] == 1, e
        assert "tool_calls[0].args nest more than 64 levels of objects and arrays" in e["content"]["message"], e
        assert not by_type(a, bad, "tool_call")


def test_output_after_the_final_line_fails_the_attempt():
    with agentd() as a:
        c = a.create(settings={"model": "late"})
        a.send(c, "x")
        wait_idle(a, c, 2)
        e = a.events(c)[1]
        assert e["type"] == "error" and "output after its final line" in e["content"]["message"], e


def test_a_delta_longer_than_a_message_reaches_watchers_cut_at_a_character():
    with agentd() as a:
        c = a.create(settings={"model": "wide"})
        w = a.watch(c)
        a.send(c, "x")
        deltas = []
        while True:
            line = w.recv(timeout=20)
            if "delta" in line:
                deltas.append(line["delta"]["text"])
            elif line["event"]["type"] == "assistant_msg":
                break
        w.close()
        wide = [d for d in deltas if len(d) > 1000]
        assert len(wide) == 1, [len(d) for d in deltas]
        assert wide[0].startswith("a\u20ac") and set(wide[0][1:]) == {"\u20ac"}, wide[0][:10]
        assert 20000 < len(wide[0]) < 30001, len(wide[0])
        assert a.events(c)[1]["content"]["text"] == "after a wide delta"


def test_compacts_queued_during_a_turn_are_answered_by_one_compaction():
    # Any number (there was a silent cap of 32), all answered by the one compaction after the turn.
    with agentd() as a:
        c = a.create(settings={"model": "m"})
        a.send(c, "one")
        wait_idle(a, c, 2)
        a.send(c, {"text": "two", "gate": "go"})
        wait_for(lambda: len(requests(a, c)) == 2, 10, "the gated turn")
        clients = []
        for i in range(40):
            k = a.conn(timeout=30)
            k.send({"op": "compact", "conversation": c, "id": i})
            clients.append(k)
        wait_for(lambda: metric(a, 'agentd_ops_total{op="compact"}') >= 40, 10, "40 compacts received")
        touch(a, "go")
        for i, k in enumerate(clients):
            r = k.recv(timeout=30)
            assert r["ok"] is True and r["id"] == i and r["summary"]["to_seq"] == 3, r
            k.close()
        summarize = [r for r in requests(a, c) if r["task"] == "summarize"]
        assert len(summarize) == 1, len(summarize)


def test_compact_crossing_a_stop_is_answered_and_the_worker_is_evicted_after():
    # A compact that reached a worker as it stopped was refused "the worker exited before compacting";
    # a worker that answered a compact op stayed "running" and was never evicted.
    with agentd(agentd_section="idle_timeout = 500ms\ncompact_events = 0") as a:
        c = a.create(settings={"model": "m"})
        for i in range(3):
            a.send(c, f"m{i}")
            wait_idle(a, c, 2 * (i + 1))
            wait_for(lambda: (get(a, c)["worker"] or {}).get("state") == "idle", 10, "an idle worker")
            with a.conn(timeout=30) as k:
                k.send({"op": "stop", "conversation": c, "id": "s"})
                k.send({"op": "compact", "conversation": c, "id": "c"})
                r1, r2 = k.recv(10), k.recv(30)
            assert r1["ok"] is True, r1
            assert r2["ok"] is True and r2["summary"]["to_seq"] == 2 * i + 1, r2
            wait_for(lambda: a.worker_pid(c) is None, 10, "the worker evicted after its compaction")

# ------------------------------------------------------------------------------------------------------
# Ended conversations


def test_an_ended_conversation_runs_no_more_turns():
    # Ending is closing: the turn in flight is stopped and not re-run, a resolution or an expiry is
    # recorded but starts nothing, and an agentd restart revives nothing.
    with agentd() as a:
        mid = a.create(settings={"model": "m"})
        a.send(mid, {"text": "hi", "gate": "go"})
        wait_for(lambda: requests(a, mid), 10, "the model call")
        model_pid = jsonl(a, "requests.jsonl")[-1]["pid"]
        a.ok({"op": "update", "conversation": mid, "status": "ended"})
        wait_for(lambda: a.worker_pid(mid) is None, 10, "the worker to stop")
        wait_for(lambda: not pid_alive(model_pid), 5, "the model to be killed")

        # end-hurry must outlive the end and the resolve below (5 s, scaled): with 1 s a loaded machine saw it
        # expire first, and the order of the resolutions was the other one.
        sus = a.create(settings={"model": "m", "tools": ["ask", "soon"]})
        a.send(sus, {"calls": [call("ask", id="end-ask"), call("soon", id="end-hurry")]})
        wait_for(lambda: status(a, sus) == "suspended", 10, "suspended")
        a.ok({"op": "update", "conversation": sus, "status": "ended"})
        wait_for(lambda: a.worker_pid(sus) is None, 10, "the worker to stop")
        assert a.request({"op": "send", "conversation": sus, "content": "x"})["error"] == "conflict"
        r = a.ok({"op": "resolve", "tool_call_id": "end-ask", "result": "yes"})
        assert a.worker_pid(sus) is None  # no worker started for it
        wait_for(lambda: len(by_type(a, sus, "resolution")) == 2, 20, "the expiry of end-hurry")
        assert [e["content"]["status"] for e in by_type(a, sus, "resolution")] == ["resolved", "expired"]
        assert by_type(a, sus, "resolution")[0]["seq"] == r["seq"]
        time.sleep(harness.scaled(0.5))  # what a turn would take; none may run
        assert a.worker_pid(sus) is None and types(a, sus)[-1] == "resolution", types(a, sus)

        a.stop()
        touch(a, "go")
        a.start()
        time.sleep(harness.scaled(0.5))  # what a revival would take; nothing may start
        for c, ty in ((mid, ["user_msg"]), (sus, ["user_msg", "assistant_msg", "tool_call", "suspension",
                                                  "tool_call", "suspension", "resolution", "resolution"])):
            g = get(a, c)
            assert g["status"] == "ended" and g["worker"] is None, g
            assert types(a, c) == ty, types(a, c)
        assert len(requests(a, mid)) == 1 and len(requests(a, sus)) == 1
        assert not a.children()

harness.main(globals())
