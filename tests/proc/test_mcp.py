"""MCP tool servers (docs/tools.md "MCP servers") against the real @modelcontextprotocol/server-everything from npm
(tests/mcp, installed by scripts/deps.sh), run by the worker over stdio: its tools offered to the model with
their schemas, calls and their results (text, structuredContent, isError), a timeout that sends
notifications/cancelled, a server killed mid-call, a worker killed mid-call (re-dispatch, same id, attempts
counted), a server that cannot start, and the minimal environment. A recorder between the worker and the
server logs every line the worker sends, so the tests see the protocol as the server saw it."""
import json
import os
import signal
import time

import harness
from harness import Agentd, wait_for, pid_alive

SERVER = harness.REPO / "tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

# Copies its stdin to the server's (logging each line to argv[1]); the server's stdout and stderr are its own.
RECORDER = r'''
import subprocess, sys, threading
log, cmd = sys.argv[1], sys.argv[2:]
p = subprocess.Popen(cmd, stdin=subprocess.PIPE)
def pump():
    with open(log, "ab") as f:
        for line in sys.stdin.buffer:
            f.write(line)
            f.flush()
            try:
                p.stdin.write(line)
                p.stdin.flush()
            except BrokenPipeError:
                break
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
threading.Thread(target=pump, daemon=True).start()
rc = p.wait()
if rc < 0:  # die as the server died, so the worker sees the same end
    import os, signal
    if -rc != signal.SIGKILL:
        signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
sys.exit(rc)
'''

# A small MCP server for what server-everything cannot be made to do on demand: its tools/list pages hold one
# tool each (nextCursor), and a call of "grow" adds a tool and announces notifications/tools/list_changed.
PAGED = r'''
import json, sys
tools = ["first", "second"]
version = sys.argv[1] if len(sys.argv) > 1 else "2025-06-18"
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    meth, mid = m.get("method"), m.get("id")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": version, "capabilities":
              {"tools": {"listChanged": True}}, "serverInfo": {"name": "paged", "version": "1"}}})
    elif meth == "tools/list":
        i = int(m.get("params", {}).get("cursor") or 0)
        res = {"tools": [{"name": tools[i], "description": "tool %d" % i, "inputSchema": {"type": "object"}}]}
        if i + 1 < len(tools):
            res["nextCursor"] = str(i + 1)
        send({"jsonrpc": "2.0", "id": mid, "result": res})
    elif meth == "tools/call":
        name = m["params"]["name"]
        if name == "grow":
            tools.append("third")
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "called " + name}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(meth)}})
'''

# A model that answers with the tools it was offered (names and schemas), as JSON text.
TOOLS_MODEL = r'''
import json, sys
req = json.load(sys.stdin)
print(json.dumps({"text": json.dumps(req["tools"])}))
'''


def config(a):
    rec = a.script("record.py", RECORDER)
    model = a.script("tools_model.py", TOOLS_MODEL)
    paged = a.script("paged.py", PAGED)
    # The recorder's lines name the server through a short script in the test's directory: the
    # configuration's lines are at most 198 bytes, and the checkout's own path may be long. The script
    # execs node, so the server's command line still names SERVER (servers() finds it by that).
    srv = a.script("ev.sh", f'exec node "{SERVER}" "$@"\n')
    return f"""
[model.tools_model]
command = {model}
[mcp.ev]
command = node {SERVER}
args = stdio
env = MCP_ALLOWED
[mcp.rec]
command = python3 {rec} {a.dir}/sent.jsonl sh {srv}
prefix = r_
timeout = 1500ms
[mcp.slow]
command = python3 {rec} {a.dir}/sent_slow.jsonl sh {srv}
timeout = 60s
max_attempts = 3
# re-dispatch is tested on this server: its tools are safe to run twice
idempotent = yes
[mcp.paged]
command = python3 {paged}
[mcp.nobody]
command = node {SERVER}
user = nobody
[mcp.future]
command = python3 {paged} 2099-01-01
[mcp.mute]
command = sleep 60
start_timeout = 1s
[mcp.broken]
command = node -e "process.stderr.write('no config here'); process.exit(3)"
"""


def start():
    env = dict(os.environ, MCP_SECRET="do-not-leak", MCP_ALLOWED="allowed-value", AGENTD_TEST_SECRET="xyz")
    a = Agentd(start=False, env=env)
    a.write_config(config(a))
    a.start()
    return a


def call(a, c, tool, args=None, timeout=30):
    return harness.call_tool(a, c, tool, args, timeout)


def idle(a, c):
    wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 30, "idle")


def session_of(pid):
    """The session id of pid (/proc/PID/stat's sixth field), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2:].split()[3])


def servers(a, needle=str(SERVER), program=b"node"):
    """Pids of the live server processes of a's agentd (node running server-everything; or another
    program whose arguments hold needle), found by agentd's session (the harness starts agentd as a
    session leader; its workers and their servers stay in it, orphans too): another test running beside
    this one starts the same server in its own agentd's session."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(program) and any(needle.encode() in x for x in argv):
                st = harness.proc_stat(int(name))
                if st and st[0] != "Z" and session_of(int(name)) == a.pid:
                    out.append(int(name))
    return out


def sent(a, log="sent.jsonl"):
    try:
        with open(os.path.join(a.dir, log)) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def started(a, name):
    return a.log().count(f"mcp {name}: started")


def test_tools_offered_with_schemas():
    with start() as a:
        c = a.create(settings={"model": "tools_model", "tools": ["ev", "broken"]})
        a.send(c, "which tools?")
        ev = wait_for(lambda: a.events(c, type="assistant_msg"), 40, "the model's answer")
        tools = {t["name"]: t for t in json.loads(ev[0]["content"]["text"])}
        assert "ev" not in tools and "broken" not in tools, tools  # servers are replaced by their tools
        assert {"ev__echo", "ev__get-sum", "ev__get-env", "ev__trigger-long-running-operation"} <= set(tools), tools
        echo = tools["ev__echo"]
        assert echo["executor"] == "server" and echo["description"] == "Echoes back the input string", echo
        assert echo["input_schema"]["properties"]["message"]["type"] == "string", echo
        assert echo["input_schema"]["required"] == ["message"], echo
        # Its resources, as two tools (a server without the capability gets none: test_pages_and_list_changed).
        assert tools["ev__read_resource"]["input_schema"]["required"] == ["uri"], tools["ev__read_resource"]
        assert tools["ev__list_resources"]["executor"] == "server", tools["ev__list_resources"]
        # The server that cannot start offers nothing, and says why in the log.
        assert not [n for n in tools if n.startswith("broken")], tools
        assert "MCP server broken cannot start: it exited with status 3 during the handshake; stderr: no config here" \
            in a.log(), a.log_tail()


def test_calls_and_results():
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["ev", "broken"]})
        r = call(a, c, "ev__get-sum", {"a": 2, "b": 40})
        assert r["status"] == "resolved" and r["result"] == {"text": "The sum of 2 and 40 is 42."}, r
        first = servers(a)
        assert len(first) == 1, first
        r = call(a, c, "ev__get-structured-content", {"location": "New York"})
        assert r["status"] == "resolved", r
        sc = r["result"]["structuredContent"]
        assert set(sc) == {"temperature", "conditions", "humidity"}, r
        assert json.loads(r["result"]["text"]) == sc, r
        # isError results and JSON-RPC level failures are errored, with the server's message.
        r = call(a, c, "ev__echo", {})
        assert r["status"] == "errored", r
        assert r["result"]["error"].startswith("MCP error -32602: Input validation error"), r
        r = call(a, c, "ev__no-such-tool", {})
        assert r["status"] == "errored" and "Tool no-such-tool not found" in r["result"]["error"], r
        # Items that are not text come as the server sent them.
        r = call(a, c, "ev__get-tiny-image")
        assert r["status"] == "resolved", r
        assert [i["type"] for i in r["result"]["content"]] == ["text", "image", "text"], r
        assert r["result"]["content"][1]["mimeType"] == "image/png" and r["result"]["content"][1]["data"], r
        # The server's environment is the minimal one plus its allowlist.
        r = call(a, c, "ev__get-env")
        env = json.loads(r["result"]["text"])
        assert env["MCP_ALLOWED"] == "allowed-value" and "MCP_SECRET" not in env, env
        assert env["AGENTD_CONVERSATION"] == c, env
        assert not [k for k in env if k.startswith("AGENTD_") and k != "AGENTD_CONVERSATION"], env
        # One server for all those calls: no call paid a start.
        assert servers(a) == first and started(a, "ev") == 1, (servers(a), first)
        # A server that cannot start: a clear error result, nothing run.
        r = call(a, c, "broken__anything")
        assert r["status"] == "errored", r
        assert r["result"]["error"] == ("MCP server broken cannot start: it exited with status 3 during the "
                                        "handshake; stderr: no config here"), r
        # The server's name alone is not one of its tools.
        r = call(a, c, "ev")
        assert r["status"] == "errored" and "ev is an MCP server: call one of its tools, ev__<tool>" == \
            r["result"]["error"], r
        idle(a, c)


def others_can_read(path):
    """Whether a user that is neither owner nor group can read path (every directory above searchable)."""
    p = os.path.abspath(path)
    if not os.stat(p).st_mode & 0o004:
        return False
    while p != "/":
        p = os.path.dirname(p)
        if not os.stat(p).st_mode & 0o001:
            return False
    return True


def test_server_as_another_user():
    if os.geteuid() != 0 or not others_can_read(SERVER):
        print("skipped: needs root and a server file that nobody can read")
        return
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["nobody"]})
        r = call(a, c, "nobody__get-sum", {"a": 1, "b": 2})
        assert r["status"] == "resolved" and r["result"]["text"] == "The sum of 1 and 2 is 3.", r
        pid = servers(a)[0]
        with open(f"/proc/{pid}/status") as f:
            uids = [line.split()[1:] for line in f if line.startswith(("Uid:", "Gid:"))]
        assert uids == [["65534"] * 4, [uids[1][0]] * 4] and uids[1][0] != "0", uids
        idle(a, c)


def test_start_failures():
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["future", "mute"]})
        r = call(a, c, "future__first")
        assert r["status"] == "errored" and r["result"]["error"] == \
            "MCP server future cannot start: initialize failed: protocol version not supported: 2099-01-01", r
        r = call(a, c, "mute__anything")
        assert r["status"] == "errored" and r["result"]["error"] == \
            "MCP server mute cannot start: no answer within start_timeout (1000 ms)", r
        idle(a, c)


def test_timeout_sends_cancelled():
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["rec"]})
        t0 = time.monotonic()
        r = call(a, c, "r_trigger-long-running-operation", {"duration": 30, "steps": 30})
        assert r["status"] == "errored" and r["result"] == {"error": "timed out after 1500 ms"}, r
        assert time.monotonic() - t0 < harness.scaled(25), "the timeout did not end the call"
        msgs = sent(a)
        methods = [m.get("method") for m in msgs]
        assert methods[:3] == ["initialize", "notifications/initialized", "tools/list"], methods
        assert msgs[0]["params"]["protocolVersion"] == "2025-11-25" and msgs[0]["params"]["clientInfo"]["name"] == \
            "agentd", msgs[0]
        call_msg = [m for m in msgs if m.get("method") == "tools/call"][-1]
        tcid = a.events(c, type="tool_call")[-1]["content"]["tool_call_id"]
        # the idempotency key in _meta (docs/tools.md): the call's id and its attempt
        assert call_msg["params"] == {"name": "trigger-long-running-operation",
                                      "arguments": {"duration": 30, "steps": 30},
                                      "_meta": {"agentd/idempotency_key": tcid, "agentd/attempt": 1}}, call_msg
        cancel = wait_for(lambda: [m for m in sent(a) if m.get("method") == "notifications/cancelled"], 5,
                          "notifications/cancelled")
        assert cancel[0]["params"] == {"requestId": call_msg["id"], "reason": "timed out"}, cancel
        # The server stays; the next call is answered by it.
        r = call(a, c, "r_get-sum", {"a": 1, "b": 1})
        assert r["status"] == "resolved" and r["result"]["text"] == "The sum of 1 and 1 is 2.", r
        assert started(a, "rec") == 1
        idle(a, c)


def test_server_killed_mid_call():
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["slow"]})
        a.send(c, '/tool slow__trigger-long-running-operation {"duration": 30, "steps": 30}')
        pid = wait_for(lambda: servers(a), 40, "the server")[0]
        wait_for(lambda: [m for m in sent(a, "sent_slow.jsonl") if m.get("method") == "tools/call"], 30,
                 "the call sent to the server")
        os.kill(pid, signal.SIGKILL)
        res = wait_for(lambda: a.events(c, type="tool_result"), 20, "the result")[0]["content"]
        assert res["status"] == "errored", res
        assert res["result"]["error"] == ("MCP server slow was killed by signal 9 during the call; it starts again "
                                          "at the next call"), res
        # The next call starts it again.
        r = call(a, c, "slow__get-sum", {"a": 3, "b": 4})
        assert r["status"] == "resolved" and r["result"]["text"] == "The sum of 3 and 4 is 7.", r
        assert started(a, "slow") == 2 and pid not in servers(a)
        # A death between calls is noticed at the next use, which starts it again.
        pid2 = servers(a)[0]
        os.kill(pid2, signal.SIGKILL)
        # Gone, and so is the recorder in front of it (else the next call may meet its death mid-call).
        wait_for(lambda: pid2 not in servers(a) and not servers(a, "sent_slow.jsonl", b"python3"), 10,
                 "the server's death")
        r = call(a, c, "slow__get-sum", {"a": 5, "b": 6})
        assert r["status"] == "resolved" and r["result"]["text"] == "The sum of 5 and 6 is 11.", r
        assert started(a, "slow") == 3
        assert "mcp slow: the server was killed by signal 9 since its last call" in a.log(), a.log_tail()
        idle(a, c)


def test_worker_killed_mid_call_redispatches():
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["slow"]})
        a.send(c, '/tool slow__trigger-long-running-operation {"duration": 3, "steps": 3}')
        pid = wait_for(lambda: servers(a), 40, "the server")[0]
        tc = wait_for(lambda: a.events(c, type="tool_call"), 10, "the call")[0]["content"]
        wait_for(lambda: [m for m in sent(a, "sent_slow.jsonl") if m.get("method") == "tools/call"], 30,
                 "the call sent to the server")
        wpid = a.ok({"op": "kill", "conversation": c})["pid"]
        wait_for(lambda: not pid_alive(wpid), 10, "the killed worker gone")
        wait_for(lambda: not pid_alive(pid) or harness.proc_stat(pid)[0] == "Z", 10,
                 "its server gone with it")
        res = wait_for(lambda: a.events(c, type="tool_result"), 40, "the re-dispatched result")
        assert len(res) == 1 and res[0]["content"]["tool_call_id"] == tc["tool_call_id"], res
        assert res[0]["content"]["status"] == "resolved", res
        assert "Long running operation completed" in res[0]["content"]["result"]["text"], res
        row = a.ok({"op": "tool_call", "tool_call_id": tc["tool_call_id"]})["tool_call"]
        assert row["attempts"] == 2 and row["status"] == "resolved", row
        assert len(a.events(c, type="tool_call")) == 1
        idle(a, c)


def test_stop_mid_call_cancels_and_redispatches():
    """agentd stops during a call: the worker tells the server the call is cancelled, exits, and the next
    agentd dispatches the call again with the same id, counting the attempt."""
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["slow"]})
        a.send(c, '/tool slow__trigger-long-running-operation {"duration": 3, "steps": 3}')
        msg = wait_for(lambda: [m for m in sent(a, "sent_slow.jsonl") if m.get("method") == "tools/call"], 40,
                       "the call sent to the server")[0]
        a.stop()
        cancel = [m for m in sent(a, "sent_slow.jsonl") if m.get("method") == "notifications/cancelled"]
        assert cancel and cancel[0]["params"] == {"requestId": msg["id"], "reason": "the agentd worker is stopping"}, \
            sent(a, "sent_slow.jsonl")
        assert not servers(a), "the server outlived its worker"
        a.start()
        res = wait_for(lambda: a.events(c, type="tool_result"), 40, "the re-dispatched result")
        tc = a.events(c, type="tool_call")
        assert len(tc) == 1 and res[0]["content"]["tool_call_id"] == tc[0]["content"]["tool_call_id"], (tc, res)
        assert res[0]["content"]["status"] == "resolved", res
        row = a.ok({"op": "tool_call", "tool_call_id": tc[0]["content"]["tool_call_id"]})["tool_call"]
        assert row["attempts"] == 2, row
        idle(a, c)


def test_pages_and_list_changed():
    with start() as a:
        c = a.create(settings={"model": "tools_model", "tools": ["paged"]})

        def offered():
            n = len(a.events(c, type="assistant_msg"))
            a.send(c, "which tools?")
            ev = wait_for(lambda: a.events(c, type="assistant_msg")[n:], 20, "the model's answer")
            return [t["name"] for t in json.loads(ev[0]["content"]["text"])]
        assert offered() == ["paged__first", "paged__second"]  # two pages, one tool each
        a.ok({"op": "update", "conversation": c, "settings": {"model": "echo"}})
        r = call(a, c, "paged__grow")
        assert r["status"] == "resolved" and r["result"] == {"text": "called grow"}, r
        idle(a, c)
        a.ok({"op": "update", "conversation": c, "settings": {"model": "tools_model"}})
        assert offered() == ["paged__first", "paged__second", "paged__third"]
        assert started(a, "paged") == 1


if __name__ == "__main__":
    if not SERVER.exists():
        raise SystemExit(f"no MCP server at {SERVER}: run scripts/deps.sh (npm ci in tests/mcp)")
    harness.main(globals())
