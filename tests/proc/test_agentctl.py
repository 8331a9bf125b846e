"""The real agentctl against the real agentd (docs/agentctl.md): the output and exit
status of every command (0 ok; 1 an error reply, `agentctl: CODE: message` on stderr; 2 usage errors and no
server), --json and raw printing the reply line exactly, watch following live until SIGINT, --help, and
where the socket comes from."""
import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time

import harness
from harness import AGENTCTL_BIN, Agentd, scaled, wait_for, pid_alive, sanitizer_reports

COMMANDS = ["ping", "create", "get", "list", "update", "delete", "send", "events", "watch", "resolve", "fork", "backup",
            "tool-call", "tool-calls", "summary", "compact", "audit", "kill", "stop", "status", "metrics",
            "shutdown", "raw", "approve", "deny", "extend", "pending", "cancel", "resume", "runs", "settle"]

TOOLS = """
[tool.approve]
executor = human
prompt = Approve?
expires = 1h
"""

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def ctl_env(a, **extra):
    env = dict(a.env)
    env.pop("AGENTD_SOCKET", None)
    env.update(extra)
    return env


def agentctl(*args, env=None, cwd=None, input=None, timeout=30):
    """agentctl without the harness's -s: (rc, stdout, stderr)."""
    p = subprocess.run([AGENTCTL_BIN] + [str(x) for x in args], input=input, capture_output=True,
                       encoding="utf-8", errors="replace", env=env, cwd=cwd, timeout=scaled(timeout))
    assert not sanitizer_reports(p.stderr), p.stderr
    return p.returncode, p.stdout, p.stderr


def fails(a, code, *args, input=None):
    """agentctl ARGS exits 1 with `agentctl: CODE: message` (one line) on stderr and nothing on stdout."""
    rc, out, err = a.ctl(*args, check=False, input=input)
    assert rc == 1, (args, rc, out, err)
    assert re.fullmatch(r"agentctl: " + re.escape(code) + r": \S.*\n", err), (args, err)
    assert out == "", (args, out)
    return err


def usage(a, *args, match=None, input=None):
    """agentctl ARGS is a usage error: exit 2, the reason on stderr, nothing on stdout."""
    rc, out, err = a.ctl(*args, check=False, input=input)
    assert rc == 2, (args, rc, out, err)
    assert err.startswith("agentctl: ") and out == "", (args, out, err)
    if match:
        assert re.search(match, err), (args, err)
    return err


def kv(out):
    """`key: value` lines -> dict; keys are aligned with spaces after the colon."""
    d = {}
    for ln in out.splitlines():
        m = re.fullmatch(r"([A-Za-z0-9_.]+):( +)(.*)", ln)
        assert m, f"not a key: value line: {ln!r} in\n{out}"
        d[m.group(1)] = m.group(3)
    # aligned: every value starts in the same column
    cols = {len(ln) - len(ln.split(": ", 1)[1].lstrip(" ")) if ": " in ln else None for ln in out.splitlines()}
    assert len(cols) <= 1, f"values not aligned:\n{out}"
    return d


def table(out):
    """A table -> (header cells, rows as lists of cells). Columns are two or more spaces apart."""
    lines = out.rstrip("\n").split("\n")
    split = [re.split(r"\s{2,}", ln.rstrip()) for ln in lines]
    return split[0], split[1:]


class LineReader:
    """A subprocess's stdout, line by line, with timeouts."""

    def __init__(self, proc):
        self.q = queue.Queue()
        self.proc = proc
        t = threading.Thread(target=self._run, daemon=True)
        t.start()

    def _run(self):
        for ln in self.proc.stdout:
            self.q.put(ln)
        self.q.put(None)

    def line(self, timeout=10):
        try:
            ln = self.q.get(timeout=scaled(timeout))
        except queue.Empty:
            raise AssertionError(f"no line from agentctl within {scaled(timeout):g}s") from None
        assert ln is not None, "agentctl's output ended"
        return ln.rstrip("\n")

    def rest(self, timeout=10):
        out = []
        while True:
            try:
                ln = self.q.get(timeout=scaled(timeout))
            except queue.Empty:
                raise AssertionError("agentctl's output did not end") from None
            if ln is None:
                return out
            out.append(ln.rstrip("\n"))


def start_watch(a, *args):
    p = subprocess.Popen([AGENTCTL_BIN, "-s", a.socket, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         encoding="utf-8", env=a.env)
    return p, LineReader(p)


def end_watch(p, sig=signal.SIGINT):
    if sig is not None:
        p.send_signal(sig)
    try:
        rc = p.wait(scaled(10))
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("agentctl watch did not exit") from None
    err = p.stderr.read()
    assert not sanitizer_reports(err), err
    return rc, err


# ---------------------------------------------------------------------------------------------------


def test_help_version_and_usage_errors():
    with Agentd() as a:
        rc, out, err = a.ctl("--help")
        assert out.startswith("usage: agentctl ") and err == "", (out, err)
        for c in COMMANDS:
            assert re.search(r"^  " + re.escape(c) + r" ", out, re.M), (c, out)
        assert "AGENTD_SOCKET" in out and "Exit status" in out
        assert agentctl("-h")[1] == out
        assert agentctl("help")[1] == out
        for c in COMMANDS:
            rc, h, err = a.ctl(c, "--help")
            assert h.startswith("usage: agentctl [-s SOCKET] [--json] [-q] [--timeout SECS] " + c), (c, h)
            assert "Example:\n  agentctl " + c in h, (c, h)
            assert agentctl("help", c)[1] == h
            assert agentctl(c, "-h")[1] == h
        assert "--event-id E" in a.ctl("send", "--help")[1]
        assert "--wait MS" in a.ctl("events", "--help")[1]
        # --help is answered without a server
        assert agentctl("-s", "/nonexistent/x.sock", "ping", "--help")[0] == 0
        rc, out, err = a.ctl("--version")
        assert re.fullmatch(r"agentctl \S+\n", out), out

        # usage errors: status 2, the reason on stderr, nothing sent
        rc, out, err = agentctl()
        assert rc == 2 and out == "" and "usage:" in err, (rc, out, err)
        usage(a, "frobnicate", match="unknown command 'frobnicate'")
        usage(a, "help", "frobnicate", match="unknown command")
        usage(a, "--bogus", "ping", match="unknown option '--bogus'")
        usage(a, "ping", "--bogus", match="unknown option '--bogus'")
        usage(a, "ping", "extra", match="unexpected argument 'extra'")
        usage(a, "get", match="missing CONV")
        usage(a, "send", "c", match="missing TEXT")
        usage(a, "create", match="--model M is required")
        usage(a, "create", "--model", match="needs an argument")
        usage(a, "update", "c", match="nothing to do")
        usage(a, "list", "--limit", "-1", match="--limit: expected a non-negative integer, got '-1'")
        usage(a, "list", "--limit", "x", match="--limit")
        usage(a, "events", "c", "--after", "x", match="--after: expected a non-negative integer")
        usage(a, "events", "c", "--wait", "1.5", match="--wait")
        usage(a, "events", "c", "--before", "99999999999999999999999", match="--before")
        usage(a, "resolve", "t", "--result", "{bad", match="--result: invalid JSON")
        usage(a, "resolve", "t", "--status", "pending", match="--status: expected one of resolved|errored")
        usage(a, "kill", "c", "--signal", "HUP", match="--signal")
        usage(a, "create", "--model", "echo", "--param", "novalue", match="--param: expected KEY=VALUE")
        usage(a, "send", "c", "x", "--json-content", match="TEXT: invalid JSON")
        usage(a, "send", "c", "[1]", "--json-content", match="--json-content needs a JSON object")
        usage(a, "send", "c", "-1 is negative", match=r"goes after --")
        usage(a, "raw", "{not json", match="invalid JSON|raw")
        usage(a, "raw", match="missing")
        usage(a, "--timeout", "x", "ping", match="--timeout")
        usage(a, "--timeout", "-1", "ping", match="--timeout")
        usage(a, "-s", "", "ping", match="empty")
        # nothing above reached agentd
        text = a.ok({"op": "metrics"})["text"]
        assert re.search(r'^agentd_ops_total\{op="create"\} 0$', text, re.M), text[:500]
        assert re.search(r'^agentd_ops_total\{op="send"\} 0$', text, re.M)


def test_conversation_commands():
    with Agentd(config=TOOLS) as a:
        rc, out, err = a.ctl("ping")
        assert re.fullmatch(r"pong \(agentd \S+\)\n", out) and err == "", (out, err)

        rc, out, _ = a.ctl("create", "--id", "demo", "--model", "echo", "--system", "Be brief.",
                           "--param", "temperature=0.2", "--param", "style=terse", "--param", "n=[1,2]")
        assert out == "demo\n", out
        rc, out, _ = a.ctl("create", "--model=echo", "--tool", "approve")
        gen = out.strip()
        assert re.fullmatch(r"[A-Za-z0-9._:-]{1,128}", gen) and out == gen + "\n", out
        s = a.ok({"op": "get", "conversation": "demo"})["conversation"]["settings"]
        assert s == {"model": "echo", "system": "Be brief.",
                     "params": {"temperature": 0.2, "style": "terse", "n": [1, 2]}}, s
        assert a.ok({"op": "get", "conversation": gen})["conversation"]["settings"]["tools"] == ["approve"]
        fails(a, "conflict", "create", "--id", "demo", "--model", "echo")
        err = fails(a, "bad_request", "create", "--model", "nope")
        assert "nope" in err
        fails(a, "bad_request", "create", "--model", "echo", "--tool", "nope")
        fails(a, "bad_request", "create", "--id", "bad id", "--model", "echo")

        # get: key: value, nested objects flattened one level, times with their UTC form
        rc, out, _ = a.ctl("get", "demo")
        d = kv(out)
        assert d["id"] == "demo" and d["settings.model"] == "echo" and d["settings.system"] == "Be brief.", d
        assert d["settings.params"] == '{"temperature":0.2,"style":"terse","n":[1,2]}', d
        assert d["status"] == "idle" and d["last_seq"] == "0" and d["worker"] == "null", d
        assert d["fsm_state"] == "null" and d["usage.input_tokens"] == "0", d
        assert re.fullmatch(r"\d{13} \(" + ISO + r"\)", d["created_at"]), d
        err = fails(a, "not_found", "get", "nope")
        assert err == "agentctl: not_found: conversation 'nope' not found\n", err

        # send: seq; --event-id duplicates; --json-content; TEXT from stdin; -- before a dash
        assert a.ctl("send", "demo", "hello")[1] == "seq: 1\n"
        wait_for(lambda: len(a.events("demo")) >= 2, 10, "the echo reply")
        assert a.ctl("send", "demo", "hi", "--event-id", "m-1")[1] == "seq: 3\n"
        wait_for(lambda: len(a.events("demo")) >= 4, 10, "the echo reply")
        rc, out, _ = a.ctl("send", "demo", "hi", "--event-id=m-1")
        assert out == "seq:       3\nduplicate: true\n", out
        assert a.ctl("send", "demo", "--json-content", '{"text":"see","attachment":"r.pdf"}')[1] == "seq: 5\n"
        wait_for(lambda: len(a.events("demo")) >= 6, 10, "the echo reply")
        assert a.ctl("send", "demo", "-", input="from stdin\n")[1] == "seq: 7\n"
        wait_for(lambda: len(a.events("demo")) >= 8, 10, "the echo reply")
        assert a.ctl("send", "demo", "--", "-1 is the answer")[1] == "seq: 9\n"
        wait_for(lambda: len(a.events("demo")) >= 10, 10, "the echo reply")
        evs = a.events("demo")
        assert evs[4]["content"] == {"text": "see", "attachment": "r.pdf"}, evs[4]
        assert evs[6]["content"] == {"text": "from stdin"}, evs[6]
        assert evs[8]["content"] == {"text": "-1 is the answer"}, evs[8]
        fails(a, "not_found", "send", "nope", "x")

        # events: SEQ TYPE CONTENT, filters
        rc, out, _ = a.ctl("events", "demo")
        lines = out.splitlines()
        assert lines[0] == '1 user_msg {"text":"hello"}', lines
        assert lines[1] == '2 assistant_msg {"text":"echo: hello","context_seq":1}', lines
        assert len(lines) == 10 and [int(ln.split()[0]) for ln in lines] == list(range(1, 11)), lines
        out = a.ctl("events", "demo", "--after", "2", "--before", "5")[1]
        assert [ln.split()[0] for ln in out.splitlines()] == ["3", "4"], out
        out = a.ctl("events", "demo", "--limit", "1", "--type", "user_msg")[1]
        assert out == '9 user_msg {"text":"-1 is the answer"}\n', out
        assert a.ctl("events", "demo", "--after", "10")[1] == ""
        fails(a, "bad_request", "events", "demo", "--type", "bogus")
        fails(a, "not_found", "events", "nope")
        # --wait long-polls: answered by the next commit
        p = subprocess.Popen([AGENTCTL_BIN, "-s", a.socket, "events", "demo", "--after", "10", "--wait", "20000"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", env=a.env)
        time.sleep(scaled(0.3))
        assert p.poll() is None, "events --wait returned before any event"
        a.send("demo", "wake")
        out, err = p.communicate(timeout=scaled(10))
        assert p.returncode == 0 and out.splitlines()[0] == '11 user_msg {"text":"wake"}', (out, err)
        t0 = time.monotonic()
        rc, out, _ = a.ctl("events", "demo", "--after", "1000", "--wait", "200")
        assert out == "" and time.monotonic() - t0 >= 0.2, out

        # list: a table, next: cursor
        for i in range(3):
            a.ctl("create", "--id", f"l{i}", "--model", "echo")
        rc, out, _ = a.ctl("list")
        head, rows = table(out)
        assert head == ["ID", "STATUS", "MODEL", "LAST_SEQ", "WORKER", "UPDATED"], out
        ids = [r[0] for r in rows]
        assert ids == sorted([gen, "demo", "l0", "l1", "l2"]), out
        demo = rows[ids.index("demo")]
        assert demo[2] == "echo" and re.fullmatch(ISO, demo[5]), demo
        rc, out, _ = a.ctl("list", "--limit", "2")
        assert out.splitlines()[-1] == "next: " + ids[1], out
        rc, out, _ = a.ctl("list", "--limit", "2", "--after", ids[1])
        assert [r[0] for r in table(out.split("\nnext:")[0])[1]] == ids[2:4], out
        rc, out, _ = a.ctl("list", "--status", "ended")
        assert table(out)[1] == [], out
        fails(a, "bad_request", "list", "--status", "sleeping")

        # update: ok; --end: later sends are conflict
        assert a.ctl("update", "demo", "--system", "Answer in French.", "--param", "t=1")[1] == "ok\n"
        s = a.ok({"op": "get", "conversation": "demo"})["conversation"]["settings"]
        assert s["system"] == "Answer in French." and s["params"] == {"t": 1} and s["model"] == "echo", s
        fails(a, "not_found", "update", "nope", "--system", "x")
        fails(a, "bad_request", "update", "nope", "--model", "nope")  # bad_request before not_found
        assert a.ctl("update", "l0", "--end")[1] == "ok\n"
        err = fails(a, "conflict", "send", "l0", "too late")
        # delete: idempotent
        rc, out, _ = a.ctl("delete", "l1")
        assert rc == 0 and out == "deleted: true\n", out
        rc, out, _ = a.ctl("delete", "l1")
        assert rc == 0 and out == "deleted: false\n", out
        fails(a, "not_found", "get", "l1")


def test_tool_summary_audit_and_worker_commands():
    with Agentd(config=TOOLS + "[agentd]\naudit = on\n") as a:
        c = a.ctl("create", "--id", "t1", "--model", "echo", "--tool", "approve")[1].strip()
        out = a.ctl("tool-calls", c)[1]
        assert table(out) == (["ID", "NAME", "EXECUTOR", "STATUS", "INSERTED", "ARGS"], []), out
        a.ctl("send", c, '/tool approve {"amount": 120}')
        pend = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"],
                        10, "a pending approval")
        tcid = pend[0]["id"]
        head, rows = table(a.ctl("tool-calls", c, "--status", "pending")[1])
        assert len(rows) == 1 and rows[0][:4] == [tcid, "approve", "human", "pending"], rows
        assert re.fullmatch(ISO, rows[0][4]) and rows[0][5] == '{"amount":120}', rows
        d = kv(a.ctl("tool-call", tcid)[1])
        assert d["id"] == tcid and d["conversation"] == c and d["executor"] == "human", d
        assert d["name"] == "approve" and d["status"] == "pending" and d["args.amount"] == "120", d
        assert d["result"] == "null" and d["resolved_at"] == "null", d
        assert re.fullmatch(r"\d{13} \(" + ISO + r"\)", d["inserted_at"]), d
        fails(a, "not_found", "tool-call", "no-such-call")

        rc, out, _ = a.ctl("resolve", tcid, "--result", '{"approved":true}')
        m = re.match(r"seq: +(\d+)\n", out)
        assert m, out
        seq = int(m.group(1))
        assert [e for e in a.events(c) if e["seq"] == seq][0]["type"] == "resolution"
        err = fails(a, "stale", "resolve", tcid, "--status", "errored", "--result", '"nobody"')
        assert tcid in err, err
        assert kv(a.ctl("tool-call", tcid)[1])["result.approved"] == "true"
        wait_for(lambda: a.events(c)[-1]["type"] == "assistant_msg" and a.events(c)[-1]["seq"] > seq, 10,
                 "the answer")
        a.ctl("send", c, "/tool approve")
        pend = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"],
                        10, "a second approval")
        a.ctl("resolve", pend[0]["id"], "--status", "errored", "--result", '"no"')
        assert a.ok({"op": "tool_call", "tool_call_id": pend[0]["id"]})["tool_call"]["status"] == "errored"

        # summary, compact
        assert a.ctl("summary", c)[1] == "no summary\n"
        rc, out, _ = a.ctl("compact", c)
        d = kv(out)
        assert int(d["from_seq"]) >= 1 and int(d["to_seq"]) >= int(d["from_seq"]) and d["version"] == "1", d
        d2 = kv(a.ctl("summary", c)[1])
        assert {k: d2[k] for k in ("from_seq", "to_seq", "version")} == \
               {k: d[k] for k in ("from_seq", "to_seq", "version")}, (d, d2)
        fails(a, "not_found", "summary", "nope")
        fails(a, "not_found", "compact", "nope")

        # audit is on here: one row per model call
        head, rows = table(a.ctl("audit", c)[1])
        assert head == ["TURN", "TASK", "MODEL", "LATENCY_MS", "SUMMARY_V", "USAGE", "INSERTED"], head
        assert len(rows) >= 3 and all(r[2] == "echo" and re.fullmatch(ISO, r[6]) for r in rows), rows
        assert {r[1] for r in rows} == {"turn", "summarize"}, rows  # the compaction above is audited too
        raw = json.loads(a.ctl("--json", "audit", c)[1])
        assert "rendered_context" in raw["model_calls"][0], raw

        # kill, stop, status
        pid = a.worker_pid(c)
        assert pid
        d = kv(a.ctl("status")[1].split("\n\n")[0])
        assert d["store.sync"] == "full" and d["workers"] == "1" and int(d["uptime_ms"]) >= 0, d
        for k in ("version", "store.path", "store.size_bytes", "store.map_size", "store.readers"):
            assert k in d, (k, d)
        head, rows = table(a.ctl("status")[1].split("\n\n")[1])
        assert head == ["CONVERSATION", "PID", "STATE", "SINCE_MS"] and rows[0][:2] == [c, str(pid)], rows
        assert a.ctl("kill", c, "--signal", "term")[1] == f"pid: {pid}\n"
        wait_for(lambda: not pid_alive(pid), 10, "the worker to exit")
        wait_for(lambda: a.worker_pid(c) is None, 10, "no worker")
        assert a.ctl("kill", c)[1] == "pid: null\n"
        assert kv(a.ctl("status")[1])["workers"] == "0"
        fails(a, "not_found", "kill", "nope")
        a.ctl("send", c, "revive")
        wait_for(lambda: a.worker_pid(c), 10, "a worker")
        pid = a.worker_pid(c)
        rc, out, _ = a.ctl("stop", c)
        assert out == "stopping: true\n", out
        wait_for(lambda: not pid_alive(pid), 10, "the stopped worker to exit")
        rc, out, _ = a.ctl("stop", c)
        assert out == "stopping: false\n", out
        fails(a, "not_found", "stop", "nope")

        # metrics: the Prometheus text as agentd wrote it
        out = a.ctl("metrics")[1]
        assert out.startswith("# HELP agentd_ops_total ") and out.endswith("\n"), out[:300]
        assert "# TYPE agentd_op_duration_seconds histogram" in out, out[:300]
        assert re.search(r'^agentd_ops_total\{op="resolve"\} 3$', out, re.M), out[:1500]
        assert re.search(r'^agentd_errors_total\{code="stale"\} 1$', out, re.M)

        # shutdown: ok, and agentd exits
        assert a.ctl("shutdown")[1] == "ok\n"
        assert a.wait(20) == 0
        rc, out, err = a.ctl("ping", check=False)
        assert rc == 2 and "cannot connect" in err and "(is agentd running?)" in err, err


def test_json_and_raw():
    with Agentd() as a:
        a.create(conversation="j")
        rc, out, err = a.ctl("--json", "ping")
        r = json.loads(out)
        assert out.count("\n") == 1 and r["ok"] is True and r["id"] == 1 and "version" in r, out
        # global options among the command's arguments
        assert json.loads(a.ctl("send", "j", "hi", "--json")[1])["seq"] == 1
        rc, out, _ = a.ctl("--json", "events", "j", "--limit", "1", "--type", "user_msg")
        r = json.loads(out)
        assert r["events"][0]["content"] == {"text": "hi"} and r["last_seq"] >= 1, r
        # an error with --json: the reply on stdout, the message on stderr, status 1
        rc, out, err = a.ctl("--json", "get", "nope", check=False)
        r = json.loads(out)
        assert rc == 1 and r["ok"] is False and r["error"] == "not_found", (rc, out)
        assert err == f"agentctl: not_found: {r['message']}\n", err

        # raw: the reply line exactly as agentd sent it (once the echo answered: last_seq holds still)
        wait_for(lambda: a.ok({"op": "get", "conversation": "j"})["conversation"]["last_seq"] == 2, 10,
                 "the echo answer")
        req = '{"op":"events","conversation":"j","limit":1,"type":"user_msg","id":"q1"}'
        rc, out, _ = a.ctl("raw", req)
        with a.conn() as k:
            k.raw(req.encode() + b"\n")
            direct = k.recv_line()
        assert out.encode() == direct + b"\n", (out, direct)
        rc, out, err = a.ctl("raw", '{"op":"frobnicate"}', check=False)
        assert rc == 1 and json.loads(out)["error"] == "unknown_op", out
        assert err == "agentctl: unknown_op: unknown op 'frobnicate'\n", err
        # ids of any type are echoed; a request over several lines is sent as one
        rc, out, _ = a.ctl("raw", '{\n  "op": "ping",\n  "id": {"a": [1, null]}\n}')
        assert json.loads(out)["id"] == {"a": [1, None]}, out
        rc, out, _ = a.ctl("raw", "-", input='{"op":"get","conversation":"j"}')
        assert json.loads(out)["conversation"]["id"] == "j", out
        # raw sends what the typed commands refuse: agentd answers bad_request (status 1)
        rc, out, err = a.ctl("raw", '{"op":"events","conversation":"j","after":-1}', check=False)
        assert rc == 1 and json.loads(out)["error"] == "bad_request", out
        rc, out, err = a.ctl("raw", '{"op":"events","conversation":"j","after":99999999999999999999999}',
                             check=False)
        assert rc == 1 and json.loads(out)["error"] == "bad_request", (out, err)
        rc, out, err = a.ctl("raw", "[1,2]", check=False)
        assert rc == 1 and json.loads(out)["error"] == "bad_request", (rc, out, err)
        # raw watch prints only the reply
        rc, out, _ = a.ctl("raw", '{"op":"watch","conversation":"j","after":0}', timeout=10)
        assert out.count("\n") == 1 and json.loads(out)["ok"] is True, out

        # Started with stdout closed, the socket took descriptor 1 and the reply was written back into it:
        # exit 0, nothing said. Now writing the reply fails, and says so.
        p = subprocess.run([AGENTCTL_BIN, "-s", a.socket, "--json", "ping"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, encoding="utf-8", env=a.env, timeout=30,
                           preexec_fn=lambda: os.close(1))
        assert p.returncode == 2 and p.stderr == "agentctl: cannot write to stdout: Bad file descriptor\n", p
        # with stdin closed too, raw still sends its argument
        p = subprocess.run([AGENTCTL_BIN, "-s", a.socket, "raw", '{"op":"ping"}'], capture_output=True,
                           encoding="utf-8", env=a.env, timeout=30, preexec_fn=lambda: os.close(0))
        assert p.returncode == 0 and json.loads(p.stdout)["ok"] is True, p


def test_watch_follows_live():
    with Agentd() as a:
        model = a.script("streamer.py", """
            import json, sys, time
            json.load(sys.stdin)
            for part in ["Sun", "ny"]:
                print(json.dumps({"delta": part}), flush=True)
                time.sleep(0.05)
            print(json.dumps({"text": "Sunny"}))
        """)
        a.write_config(f"[model.streamer]\ncommand = {model}\n")
        a.restart()
        c = a.create(conversation="w")
        a.send(c, "before")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")

        # only new events by default
        p, r = start_watch(a, "watch", c)
        time.sleep(scaled(0.3))
        a.send(c, "and tomorrow?")
        assert r.line() == '3 user_msg {"text":"and tomorrow?"}'
        assert r.line() == '4 assistant_msg {"text":"echo: and tomorrow?","context_seq":3}'
        a.send(c, "more")
        assert r.line().startswith("5 user_msg ")
        assert r.line().startswith("6 assistant_msg ")
        rc, err = end_watch(p)
        assert rc == 0 and err == "", (rc, err)

        # --after 0 replays the log, then goes on live; SIGTERM ends it too
        p, r = start_watch(a, "watch", c, "--after", "0")
        assert [r.line().split()[0] for _ in range(6)] == ["1", "2", "3", "4", "5", "6"]
        a.send(c, "live")
        assert r.line().startswith("7 user_msg ")
        assert r.line().startswith("8 assistant_msg ")
        rc, err = end_watch(p, signal.SIGTERM)
        assert rc == 0, (rc, err)

        # --json: the reply line, then the streamed lines as received
        p, r = start_watch(a, "--json", "watch", c, "--after", "7")
        reply = json.loads(r.line())
        assert reply["ok"] is True and reply["last_seq"] == 8, reply
        assert json.loads(r.line()) == {"event": a.events(c, after=7)[0]}
        rc, err = end_watch(p)
        assert rc == 0

        # deltas from a streaming model
        s = a.create("streamer", conversation="st")
        p, r = start_watch(a, "watch", s)
        time.sleep(scaled(0.3))
        a.send(s, "weather?")
        lines = [r.line()]
        while not lines[-1].startswith("2 assistant_msg"):
            lines.append(r.line())
        assert lines[0] == '1 user_msg {"text":"weather?"}', lines
        assert [ln for ln in lines if ln.startswith("- delta")] == ['- delta {"text":"Sun"}',
                                                                   '- delta {"text":"ny"}'], lines
        assert lines[-1] == '2 assistant_msg {"text":"Sunny","context_seq":1}', lines
        rc, err = end_watch(p)
        assert rc == 0

        # agentd ends the stream when the conversation is deleted: exit 0
        p, r = start_watch(a, "watch", c)
        time.sleep(scaled(0.3))
        a.ok({"op": "delete", "conversation": c})
        assert r.rest() == []
        rc, err = end_watch(p, None)
        assert rc == 0, (rc, err)
        # an error reply ends it at once with status 1
        p, r = start_watch(a, "watch", "nope")
        rc, err = end_watch(p, None)
        assert rc == 1 and err.startswith("agentctl: not_found: "), (rc, err)
        # and when agentd goes away: exit 0 after the stream closes
        p, r = start_watch(a, "watch", s)
        time.sleep(scaled(0.3))
        a.stop()
        rc, err = end_watch(p, None)
        assert rc == 0, (rc, err)


def test_socket_resolution_and_connection_errors():
    a = Agentd(start=False)
    try:
        # agentd listening where agentctl looks by default: ./agentd-data/agentd.sock
        os.makedirs(os.path.join(a.dir, "agentd-data"))
        a.socket = os.path.join(a.dir, "agentd-data", "agentd.sock")
        a.start()
        env = ctl_env(a)
        rc, out, err = agentctl("ping", env=env, cwd=a.dir)
        assert rc == 0 and out.startswith("pong"), (rc, out, err)
        # elsewhere, no socket there: status 2, naming the default path
        rc, out, err = agentctl("ping", env=env, cwd="/")
        assert rc == 2 and out == "", (rc, out)
        assert err == ("agentctl: cannot connect to agentd: tried ./agentd-data/agentd.sock (No such file or "
                       "directory) and /run/agentd/agentd.sock (No such file or directory); is agentd running? "
                       "Give its socket with -s SOCKET or $AGENTD_SOCKET\n") or not os.path.exists(
                           "/run/agentd/agentd.sock"), err
        # $AGENTD_SOCKET, over the default
        rc, out, err = agentctl("ping", env=ctl_env(a, AGENTD_SOCKET=a.socket), cwd="/")
        assert rc == 0, (rc, out, err)
        rc, out, err = agentctl("ping", env=ctl_env(a, AGENTD_SOCKET="/nonexistent/s.sock"), cwd=a.dir)
        assert rc == 2 and "/nonexistent/s.sock" in err, (rc, err)
        # an empty $AGENTD_SOCKET is unset
        rc, out, err = agentctl("ping", env=ctl_env(a, AGENTD_SOCKET=""), cwd=a.dir)
        assert rc == 0, (rc, out, err)
        # -s over $AGENTD_SOCKET, in each of its spellings
        bad = ctl_env(a, AGENTD_SOCKET="/nonexistent/s.sock")
        for args in (["-s", a.socket], ["--socket", a.socket], ["--socket=" + a.socket], ["-s" + a.socket]):
            rc, out, err = agentctl(*args, "ping", env=bad, cwd="/")
            assert rc == 0, (args, rc, err)
        rc, out, err = agentctl("ping", "-s", a.socket, env=bad, cwd="/")
        assert rc == 0, (rc, err)
        rc, out, err = agentctl("-s", "/nonexistent/x.sock", "ping", env=ctl_env(a, AGENTD_SOCKET=a.socket))
        assert rc == 2 and "cannot connect to /nonexistent/x.sock" in err, err
        # a path too long for sun_path
        rc, out, err = agentctl("-s", "/tmp/" + "x" * 200, "ping", env=env)
        assert rc == 2 and "too long" in err, err
        # not a socket
        f = os.path.join(a.dir, "plain")
        open(f, "w").close()
        rc, out, err = agentctl("-s", f, "ping", env=env)
        assert rc == 2 and "cannot connect" in err, err

        # a server that accepts and never answers: --timeout; one that hangs up without a reply
        path = os.path.join(a.dir, "mute.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(8)
        held = []

        def serve():
            while True:
                try:
                    cs, _ = srv.accept()
                except OSError:
                    return
                held.append(cs)

        threading.Thread(target=serve, daemon=True).start()
        t0 = time.monotonic()
        rc, out, err = agentctl("-s", path, "--timeout", "0.3", "ping", env=env)
        assert rc == 2 and "no reply from agentd within 0.3 s" in err, (rc, err)
        assert time.monotonic() - t0 < scaled(30)  # the stand-in never answers: only a hang takes this long
        # events --wait extends the deadline by MS
        t0 = time.monotonic()
        rc, out, err = agentctl("-s", path, "--timeout", "0.2", "events", "x", "--wait", "500", env=env)
        assert rc == 2 and time.monotonic() - t0 >= 0.65, (rc, err, time.monotonic() - t0)
        # the budget in the message to the millisecond, never rounded to three digits (was "1.23 s";
        # past 1000 s it printed "3.66e+03 s")
        rc, out, err = agentctl("-s", path, "--timeout", "1.2345", "ping", env=env)
        assert rc == 2 and re.search(r"within 1\.23[45] s \(see --timeout\)", err), (rc, err)
        for cs in held:
            cs.close()
        srv.close()

        path2 = os.path.join(a.dir, "rude.sock")
        srv2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv2.bind(path2)
        srv2.listen(8)

        def rude():
            cs, _ = srv2.accept()
            cs.recv(4096)
            cs.sendall(b'{"event":"not a reply"}\n')
            cs.close()

        threading.Thread(target=rude, daemon=True).start()
        rc, out, err = agentctl("-s", path2, "ping", env=env)
        assert rc == 2 and "closed the connection without replying" in err, (rc, err)
        assert "ignoring a line that is not a reply" in err, err
        srv2.close()
        a.stop()
    finally:
        a.close()


def test_command_line_corners():
    # Found by review: each was documented one way and did another.
    d = harness._mkdtemp()
    try:
        # an empty --socket bound an abstract socket (no file, no mode 0600) and agentd ran on it;
        # an empty --data was exit 1, a runtime failure; both are usage errors now, as in the file
        for opt in ("--socket", "--data", "--worker"):
            p = harness.run_agentd(opt, "", capture_output=True, text=True, cwd=d, timeout=scaled(5))
            assert p.returncode == 2 and f"agentd: {opt} is an empty path" in p.stderr, (opt, p)
        cfg = os.path.join(d, "a.ini")
        with open(cfg, "w") as f:
            f.write("[agentd]\nsocket =\n")
        p = harness.run_agentd("--config", cfg, "--data", os.path.join(d, "data"), capture_output=True,
                               text=True, cwd=d, timeout=scaled(5))
        assert p.returncode == 2 and "bad value '' for 'socket' in [agentd]" in p.stderr, p
        os.unlink(cfg)
        assert os.listdir(d) == [], os.listdir(d)
        # agentd check: --data=DIR as agentd's own options take it, and --help on stdout, status 0
        p = harness.run_agentd("check", f"--data={d}", capture_output=True, text=True)
        assert p.returncode == 2 and "there is no store there (no data.mdb)" in p.stdout, p
        p = harness.run_agentd("check", "--help", capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.startswith("usage: agentd check [--data DIR | --store TARGET]"), p
        p = harness.run_agentd("check", "--data=", capture_output=True, text=True)
        assert p.returncode == 2 and "usage: agentd check" in p.stderr, p
    finally:
        os.rmdir(d)
    with Agentd() as a:
        env = ctl_env(a)
        # --version among a command's arguments, as the global options are
        rc, out, err = agentctl("-s", a.socket, "ping", "--version", env=env)
        assert rc == 0 and re.fullmatch(r"agentctl \S+\n", out), (rc, out, err)
        # --json takes no value: said so, not "unknown option"
        rc, out, err = agentctl("-s", a.socket, "list", "--json=1", env=env)
        assert rc == 2 and "agentctl: list: option --json takes no value" in err, (rc, err)
        # raw passes on a number no double holds (it was refused locally as "real number overflow")
        a.create(conversation="j")
        big = "1" + "0" * 400
        rc, out, err = agentctl("-s", a.socket, "raw", '{"op":"events","conversation":"j","after":%s}' % big,
                                env=env)
        assert rc == 1 and json.loads(out)["error"] == "bad_request", (rc, out, err)
        rc, out, err = agentctl("-s", a.socket, "raw", '{"op":"ping",', env=env)
        assert rc == 2 and "invalid JSON" in err, (rc, err)
        # audit's help names the columns it prints
        rc, out, err = agentctl("audit", "--help")
        assert rc == 0 and "(TURN TASK MODEL LATENCY_MS SUMMARY_V USAGE INSERTED)" in out, out


def test_watch_ends_on_a_signal_while_its_reader_does_not_read():
    # agentctl.md: watch exits 0 "also when interrupted by SIGINT/SIGTERM". With its output pipe full,
    # a signal interrupted the write after part of it, stdio wrote the rest, and agentctl blocked for
    # ever: only SIGKILL ended it.
    with Agentd() as a:
        a.create(conversation="b")
        a.send("b", "y" * 200000)
        wait_for(lambda: len(a.events("b")) >= 2, 10, "the echo reply")
        for sig in (signal.SIGTERM, signal.SIGINT):
            r, w = os.pipe()
            p = subprocess.Popen([AGENTCTL_BIN, "-s", a.socket, "watch", "b", "--after", "0"], stdout=w,
                                 stderr=subprocess.PIPE, text=True)
            os.close(w)
            try:
                # the pipe (64 KiB) fills: agentctl blocks writing the first event
                wait_for(lambda: (harness.proc_stat(p.pid) or ("?",))[0] == "S", 10, "agentctl blocked on its output")
                time.sleep(scaled(0.3))
                assert p.poll() is None
                p.send_signal(sig)
                try:
                    rc = p.wait(scaled(5))
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"agentctl watch ignored {sig.name} while its output was blocked")
                assert rc == 0 and p.stderr.read() == "", rc
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stderr.close()
                os.close(r)


def test_a_configuration_that_is_not_a_regular_file_is_refused():
    # A pipe (--config <(gen)) was read by the line check, then found empty by the parser: agentd ran on the
    # defaults while its workers got the real text; with one writer it hung re-reading the path for its copy.
    d = harness._mkdtemp()
    try:
        fifo = os.path.join(d, "cfg")
        os.mkfifo(fifo)

        def writer():
            with open(fifo, "w") as f:
                f.write("[model.m]\ncommand = /bin/true\n")

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        p = harness.run_agentd("--config", fifo, "--data", os.path.join(d, "data"), capture_output=True, text=True,
                               cwd=d, timeout=scaled(10))
        assert p.returncode == 2 and f"agentd: {fifo}: not a regular file" in p.stderr, p
        assert not os.path.exists(os.path.join(d, "data"))
        t.join(scaled(5))
    finally:
        for n in os.listdir(d):
            os.unlink(os.path.join(d, n))
        os.rmdir(d)


harness.main(globals())
