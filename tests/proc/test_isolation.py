"""Tool and model isolation (docs/tools.md "Isolation"): the minimal environment with its allowlist (and none of
agentd's own AGENTD_* variables), the user a
tool runs as (agentd runs as root on CI; the tests that need root are skipped otherwise), and the limits a tool
is killed at, each seen as the tool_result a model would get."""
import json
import os
import shutil
import signal
import tempfile

import harness
from harness import Agentd, wait_for

# Scripts live in a directory anyone may read, so a tool that runs as nobody can run them, with the system's
# python3 (the test's own may live under root's home, which nobody cannot enter).
SCRIPTS = tempfile.mkdtemp(prefix="agentd-iso-")
os.chmod(SCRIPTS, 0o755)
SYSTEM_PY = shutil.which("python3", path="/usr/bin:/bin") or "python3"

ENV_TOOL = harness.write_script(SCRIPTS, "env_tool.py", r'''
import json, os, sys
json.load(sys.stdin)
print(json.dumps({"env": dict(os.environ), "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}))
''')

# Connects to the socket named in its args and asks for a ping: what a tool could do to agentd.
SOCKET_TOOL = harness.write_script(SCRIPTS, "socket_tool.py", r'''
import json, socket, sys
path = json.load(sys.stdin)["args"]["socket"]
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
    s.sendall(b'{"op":"ping","id":1}\n')
    s.settimeout(5)
    print(json.dumps({"connected": True, "reply": s.recv(4096).decode()}))
except OSError as e:
    print(json.dumps({"connected": False, "errno": e.errno, "strerror": e.strerror}))
''')

HOG_TOOL = harness.write_script(SCRIPTS, "hog_tool.py", r'''
import json, sys
what = json.load(sys.stdin)["args"]["what"]
if what == "memory":
    blocks = [bytearray(16 << 20) for _ in range(64)]   # 1 GiB, touched
    print("allocated", len(blocks))
elif what == "cpu":
    while True:
        pass
elif what == "files":
    fs = [open("/dev/null") for _ in range(200)]
    print("opened", len(fs))
''')

# Connects to 127.0.0.1:PORT: what a tool could do to any service on the machine.
TCP_TOOL = harness.write_script(SCRIPTS, "tcp_tool.py", r'''
import json, socket, sys
port = json.load(sys.stdin)["args"]["port"]
try:
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    print(json.dumps({"connected": True}))
except OSError as e:
    print(json.dumps({"connected": False, "errno": e.errno, "strerror": e.strerror}))
''')

ENV_MODEL = harness.write_script(SCRIPTS, "env_model.py", r'''
import json, os, sys
json.load(sys.stdin)
print(json.dumps({"text": json.dumps(dict(os.environ))}))
''')

CONFIG = f"""
[model.env_model]
command = {ENV_MODEL}
env = ISO_ALLOWED
[tool.env_open]
command = {ENV_TOOL}
[tool.env_allowed]
command = {ENV_TOOL}
env = ISO_ALLOWED ISO_UNSET_ALLOWED 'ISO_SET=set by the configuration'
[tool.connect]
command = {SOCKET_TOOL}
sandbox = no
[tool.connect_nobody]
command = {SYSTEM_PY} {SOCKET_TOOL}
user = nobody
sandbox = no
[tool.whoami_nobody]
command = {SYSTEM_PY} {ENV_TOOL}
user = nobody
[tool.tcp]
command = {TCP_TOOL}
[tool.tcp_none]
command = {TCP_TOOL}
network = none
[tool.hog_memory]
command = {HOG_TOOL}
rlimit_as = 256m
[tool.hog_cpu]
command = {HOG_TOOL}
rlimit_cpu = 1
timeout = 60s
[tool.hog_files]
command = {HOG_TOOL}
rlimit_nofile = 64
"""

TOOLS = ["env_open", "env_allowed", "connect", "connect_nobody", "whoami_nobody", "hog_memory", "hog_cpu",
         "hog_files", "tcp", "tcp_none"]


def start():
    # AGENTD_TEST_SECRET: a variable of agentd's own kind, which no tool or model may see either.
    env = dict(os.environ, ISO_SECRET="do-not-leak", ISO_ALLOWED="allowed-value", LANG="C.UTF-8",
               AGENTD_TEST_SECRET="xyz")
    env.pop("ISO_UNSET_ALLOWED", None)
    a = Agentd(config=CONFIG, env=env)
    c = a.create(settings={"model": "echo", "tools": TOOLS})
    return a, c


def call(a, c, tool, args=None, timeout=20):
    return harness.call_tool(a, c, tool, args, timeout)


def test_environment_is_minimal():
    a, c = start()
    with a:
        r = call(a, c, "env_open")
        assert r["status"] == "resolved", r
        env = r["result"]["env"]
        assert "ISO_SECRET" not in env and "ISO_ALLOWED" not in env, env
        assert env["LANG"] == "C.UTF-8" and env["PATH"] and env["HOME"], env
        assert env["AGENTD_TOOL_CALL_ID"] == r["tool_call_id"] and env["AGENTD_CONVERSATION"] == c, env
        # Nothing else: a variable the worker has but nobody allowed would show here (AGENTD_TEST_SECRET,
        # AGENTD_STORE under PostgreSQL).
        assert set(env) == {"PATH", "HOME", "LANG", "AGENTD_TOOL_CALL_ID", "AGENTD_CONVERSATION"}, env
        r = call(a, c, "env_allowed")
        env = r["result"]["env"]
        assert env["ISO_ALLOWED"] == "allowed-value", env
        assert env["ISO_SET"] == "set by the configuration", env
        assert "ISO_UNSET_ALLOWED" not in env and "ISO_SECRET" not in env, env
        assert "AGENTD_TEST_SECRET" not in env, env


def test_model_environment_is_minimal():
    a, c = start()
    with a:
        a.ok({"op": "update", "conversation": c, "settings": {"model": "env_model"}})
        a.send(c, "which variables?")
        ev = wait_for(lambda: a.events(c, type="assistant_msg"), 10, "the model's answer")
        env = json.loads(ev[0]["content"]["text"])
        assert env["ISO_ALLOWED"] == "allowed-value" and env["AGENTD_CONVERSATION"] == c, env
        assert env["LANG"] == "C.UTF-8" and env["PATH"] and env["HOME"], env
        # Not AGENTD_TEST_SECRET, not ISO_SECRET, not AGENTD_TOOL_CALL_ID (a model is no tool call).
        assert set(env) == {"PATH", "HOME", "LANG", "AGENTD_CONVERSATION", "ISO_ALLOWED"}, env


def test_network_none_cannot_connect():
    """network = none: the tool runs in an empty network namespace; a loopback listener the same tool reaches
    with the default (host) is unreachable. Where the kernel refuses the namespace the call is a clear error,
    never a run with the network."""
    import socket
    a, c = start()
    with a, socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        port = ls.getsockname()[1]
        r = call(a, c, "tcp", {"port": port})
        assert r["status"] == "resolved" and r["result"]["connected"] is True, r
        r = call(a, c, "tcp_none", {"port": port})
        if r["status"] == "errored":
            assert r["result"]["error"] == "cannot run the tool without a network (network = none)", r
            assert r["result"]["reason"].startswith("cannot make its network namespace (network = none): "), r
            print("note: this kernel refuses a network namespace: checked the clear error instead")
        else:
            assert r["status"] == "resolved" and r["result"]["connected"] is False, r
            assert r["result"]["errno"] in (101, 111), r  # ENETUNREACH (lo down), ECONNREFUSED


def test_other_user_cannot_reach_agentd():
    if os.geteuid() != 0:
        print("skipped: needs root (user = nobody)")
        return
    a, c = start()
    with a:
        # As agentd's user the tool reaches the control socket: the check below could fail.
        r = call(a, c, "connect", {"socket": a.socket})
        assert r["result"]["connected"] is True and '"ok":true' in r["result"]["reply"], r
        r = call(a, c, "connect_nobody", {"socket": a.socket})
        assert r["status"] == "resolved", r
        assert r["result"]["connected"] is False and r["result"]["errno"] in (13, 1), r  # EACCES / EPERM
        r = call(a, c, "whoami_nobody")
        assert r["result"]["uid"] == 65534 and r["result"]["groups"] in ([r["result"]["gid"]], []), r
        assert r["result"]["gid"] != 0, r


def test_killed_at_limits():
    a, c = start()
    with a:
        r = call(a, c, "hog_memory", {"what": "memory"})
        assert r["status"] == "errored", r
        assert "rlimit_as = 268435456 bytes" in r["result"]["error"], r
        assert "MemoryError" in r["result"]["stderr"], r
        r = call(a, c, "hog_cpu", {"what": "cpu"}, timeout=30)
        assert r["status"] == "errored", r
        assert r["result"]["error"] == "killed at its CPU time limit (rlimit_cpu = 1 s)", r
        assert r["result"]["signal"] == signal.SIGXCPU, r
        r = call(a, c, "hog_files", {"what": "files"})
        if harness.VALGRIND_WORKERS:
            # valgrind keeps RLIMIT_NOFILE to itself: a worker under it cannot pass that limit on.
            assert r["status"] == "resolved" and r["result"] == "opened 200", r
        else:
            assert r["status"] == "errored" and "rlimit_nofile = 64" in r["result"]["error"], r
            assert "Too many open files" in r["result"]["stderr"], r
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 10, "idle")


def test_user_without_root_is_a_clear_error():
    if os.geteuid() == 0:
        print("skipped: runs as root (the drop succeeds)")
        return
    a, c = start()
    with a:
        r = call(a, c, "whoami_nobody")
        assert r["status"] == "errored" and r["result"]["error"].startswith("cannot run the tool as user nobody"), r


if __name__ == "__main__":
    try:
        harness.main(globals())
    finally:
        shutil.rmtree(SCRIPTS, ignore_errors=True)
