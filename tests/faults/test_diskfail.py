"""What agentd does when a write or a flush of data.mdb fails (docs/durability.md, "A flush that fails").
The failures are real system-call failures: tests/faults/diskfail.c, preloaded into agentd and its workers,
makes the named calls on data.mdb fail with EIO or ENOSPC while a flag file exists.

- The first failed flush (the flusher's, the writer thread's, a worker's, a commit's own) is never retried:
  after it the kernel may have dropped the pages it could not write, so a later flush that succeeds proves
  nothing. Every reply that waited for a flush is answered `unavailable`, none claims durability, and agentd
  stops with status 1 saying why. Restarted on a good disk, `agentd check` passes and every acknowledged
  write is in the log, once.
- A write that fails with ENOSPC is a full store: the send is refused `store_full`, nothing acknowledged
  is lost, and agentd goes on; once there is room the next send succeeds.

LMDB only (a PostgreSQL commit is durable when it returns; PostgreSQL itself stops on a failed fsync), and
not in sanitizer builds or under valgrind, which interpose the same calls (tests/CMakeLists.txt)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proc"))
import harness  # noqa: E402
from harness import Agentd, wait_for  # noqa: E402

SHIM = os.environ.get("AGENTD_DISKFAIL_SHIM", "")


def env_failing(flag, calls, err="EIO", thread=None):
    assert SHIM and os.path.exists(SHIM), f"AGENTD_DISKFAIL_SHIM names no library: {SHIM!r}"
    env = dict(os.environ, LD_PRELOAD=SHIM, AGENTD_DISKFAIL=f"{err}:{calls}:{flag}")
    if thread:
        env["AGENTD_DISKFAIL_THREAD"] = thread  # a comma-separated list
    else:
        env.pop("AGENTD_DISKFAIL_THREAD", None)
    return env


def dynamic_worker():
    """--worker for the dynamically linked agentd-worker: the static one ignores LD_PRELOAD."""
    worker = os.path.join(os.path.dirname(harness.AGENTD_BIN), "agentd-worker")
    return ("--worker", worker + "-dynamic" if os.path.exists(worker + "-dynamic") else worker)


def failures(flag):
    """How many calls the shim failed (one byte each in FLAG.count)."""
    try:
        return os.path.getsize(flag + ".count")
    except FileNotFoundError:
        return 0


def acknowledged_sends(a, c, n, prefix):
    """n sends, each answered ok: their texts."""
    texts = [f"{prefix} {i}" for i in range(n)]
    for t in texts:
        a.send(c, t)
    return texts


def wait_idle(a, c, what):
    wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 60, what)


def user_texts(a, c):
    return [e["content"]["text"] for e in a.events(c) if e["type"] == "user_msg"]


def restart_and_check(a, c, acked):
    """Start a on a good disk (no shim): agentd check passes, every acknowledged text is in c's log once."""
    a.env.pop("LD_PRELOAD", None)
    a.env.pop("AGENTD_DISKFAIL", None)
    a.env.pop("AGENTD_DISKFAIL_THREAD", None)
    r = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True, timeout=harness.scaled(60))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    a.start()
    texts = user_texts(a, c)
    for t in acked:
        assert texts.count(t) == 1, (t, texts)
    return texts


def test_a_failed_flush_is_answered_unavailable_and_agentd_stops():
    with tempfile.TemporaryDirectory() as d:
        flag = os.path.join(d, "fail")
        # The flusher's and the workers' fdatasync fail, not the writer thread's: the send's own commit
        # succeeds, and its reply waits for a flush that would make it durable (the flusher's, or the echo
        # worker's commit after it), which fails.
        with Agentd(env=env_failing(flag, "fdatasync", thread="flusher,agentd-worker"), extra_args=dynamic_worker()) as a:
            c = a.create()
            acked = acknowledged_sends(a, c, 3, "before")
            wait_idle(a, c, "the echo's answers")
            idle = a.conn()  # connected and free to send: the flusher, not the writer thread, flushes
            idle.request({"op": "ping"})
            open(flag, "w").close()
            sender = a.conn(60)
            sender.send({"op": "send", "conversation": c, "content": "held", "id": 7})
            r = sender.recv()
            # Never ok: the commit happened, but nothing can make it durable now.
            assert r.get("ok") is False and r.get("id") == 7 and r.get("error") == "unavailable", r
            assert "flushing the store failed" in r.get("message", ""), r
            assert failures(flag) >= 1
            rc = a.wait(60)
            assert rc == 1, rc
            log = a.log()
            assert "flushing the store failed: " in log and "later flush can prove them durable" in log, log[-2000:]
            assert "final sync" not in log
            sender.close()
            idle.close()
            os.unlink(flag)
            texts = restart_and_check(a, c, acked)
            # The held send may be in the log (committed) or not; never twice.
            assert texts.count("held") <= 1, texts


MODEL = r"""
import json, os, sys, time
go = sys.argv[1]
req = json.load(sys.stdin)
msgs = req.get("messages", [])
def answer(text, calls=()):
    print(json.dumps({"text": text, "tool_calls": list(calls), "usage": {"input_tokens": 1, "output_tokens": 1}}))
    sys.exit(0)
if req["task"] != "turn" or msgs[-1]["type"] == "tool_result":
    answer("after")
if msgs[-1]["content"].get("text") != "act":
    answer("ok")
while not os.path.exists(go):
    time.sleep(0.01)
answer("acting", [{"name": "effect", "args": {}}])
"""

TOOL = r"""
import json, sys
req = json.load(sys.stdin)
with open(sys.argv[1], "a") as f:
    f.write(req["tool_call_id"] + "\n")
print(json.dumps({"done": True}))
"""


def test_no_tool_runs_after_a_failed_flush():
    with tempfile.TemporaryDirectory() as d:
        flag, go, ran = (os.path.join(d, n) for n in ("fail", "go", "ran"))
        a = Agentd(start=False, env=env_failing(flag, "fdatasync"), extra_args=dynamic_worker())
        model, tool = a.script("model.py", MODEL), a.script("tool.py", TOOL)
        a.write_config(f"""
[model.m]
command = {sys.executable} {model} {go}
retries = 0
[tool.effect]
executor = server
command = {sys.executable} {tool} {ran}
""")
        a.start()
        with a:
            c = a.create(settings={"model": "m", "tools": ["effect"]})
            acked = acknowledged_sends(a, c, 1, "before")
            wait_idle(a, c, "the model's answer")
            a.send(c, "act")
            acked.append("act")
            # Every flush fails from here on (agentd's and the worker's): the worker's commit of the tool
            # call, or its flush before the tool runs, fails, it exits without running the tool, and agentd
            # stops.
            open(flag, "w").close()
            open(go, "w").close()
            rc = a.wait(60)
            assert rc == 1, (rc, a.log()[-2000:])
            log = a.log()
            assert "flushing the store failed" in log, log[-2000:]
            assert "a failed flush is never retried" in log or "exited: a flush of the store failed" in log, \
                log[-2000:]
            assert failures(flag) >= 1
            assert not os.path.exists(ran), "the tool ran after a failed flush"
            os.unlink(flag)
            restart_and_check(a, c, acked)


def test_a_write_without_room_is_refused_and_agentd_goes_on():
    with tempfile.TemporaryDirectory() as d:
        flag = os.path.join(d, "fail")
        with Agentd(env=env_failing(flag, "write", err="ENOSPC"), extra_args=dynamic_worker()) as a:
            c = a.create()
            acked = acknowledged_sends(a, c, 2, "before")
            wait_idle(a, c, "the echo's answers")
            last = a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"]
            open(flag, "w").close()
            r = a.request({"op": "send", "conversation": c, "content": "no room"})
            assert r.get("ok") is False and r.get("error") == "store_full", r
            assert failures(flag) >= 1
            assert a.running() and a.ok({"op": "ping"})
            assert a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"] == last
            os.unlink(flag)
            acked += acknowledged_sends(a, c, 1, "after")
            wait_idle(a, c, "the echo's answer")
            texts = user_texts(a, c)
            assert "no room" not in texts and all(texts.count(t) == 1 for t in acked), texts
            a.stop()
            restart_and_check(a, c, acked)


harness.main(globals())
