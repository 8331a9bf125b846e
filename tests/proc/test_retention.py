"""Retention (docs/operations.md, "Retention"): idle conversations ended after end_idle_after, ended ones
removed after remove_ended_after (exported into retention_export first, a stream `agentd import` takes),
what is not idle (or waits for a scheduled wakeup) left alone, a failed export keeping its conversation, bad settings refused; and `agentd
compact` giving an LMDB file's free pages back to the filesystem with nothing lost."""
import json
import os
import subprocess

import harness
from harness import Agentd, run_agentd, scaled, wait_for

END_IDLE, REMOVE_ENDED = scaled(1.5), scaled(1.0)


def retention_config(export):
    return f"""
[agentd]
end_idle_after = {END_IDLE:.3f}s
remove_ended_after = {REMOVE_ENDED:.3f}s
retention_interval = 1s
retention_export = {export}

[tool.ask]
executor = human
prompt = Approve?
"""


def gone(a, c):
    r = a.request({"op": "get", "conversation": c})
    return r.get("error") == "not_found"


def metric(a, name):
    text = a.ok({"op": "metrics"})["text"]
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in the metrics:\n{text}")


def test_idle_ended_then_exported_and_removed():
    with Agentd(start=False) as a:
        export = os.path.join(a.dir, "exported")
        os.mkdir(export)
        a.write_config(retention_config(export))
        a.start()
        idle = a.create()
        a.send(idle, "hello")
        wait_for(lambda: len(a.events(idle)) >= 2, 30, "the echo answer")
        ended = a.create()
        a.ok({"op": "update", "conversation": ended, "status": "ended"})
        waiting = a.create(settings={"model": "echo", "tools": ["ask"]})
        a.send(waiting, "/tool ask {}")
        wait_for(lambda: a.ok({"op": "get", "conversation": waiting})["conversation"]["status"] == "suspended", 30,
                 "the approval to wait")
        wakes = a.create()  # idle, but a scheduled wakeup waits: not abandoned
        a.ok({"op": "schedule", "conversation": wakes, "text": "follow up", "after": 3_600_000})
        before = {c: a.ok({"op": "get", "conversation": c})["conversation"] for c in (idle, ended)}
        log_before = a.events(idle)
        # The idle one is ended first, once it has been idle END_IDLE...
        wait_for(lambda: gone(a, idle) or a.ok({"op": "get", "conversation": idle})["conversation"]["status"] == "ended",
                 scaled(30), "the idle conversation to be ended")
        # ... and both are removed, each exported first.
        wait_for(lambda: gone(a, idle) and gone(a, ended), scaled(30), "the ended conversations to be removed")
        for c in (idle, ended):
            path = os.path.join(export, c + ".jsonl")
            with open(path) as f:
                lines = [json.loads(x) for x in f]
            assert lines[0]["agentd_export"] and lines[0]["conversations"] == 1, lines[0]
            conv = [x for x in lines if x.get("kind") == "conv"]
            assert len(conv) == 1 and conv[0]["id"] == c and conv[0]["status"] == "ended", conv
            # It waited its time: ended at least END_IDLE after its last change, removed after REMOVE_ENDED.
            if c == idle:
                assert conv[0]["updated_at"] - before[c]["updated_at"] >= END_IDLE * 1000 - 1, (conv, before[c])
            assert "end" in lines[-1] and lines[-1]["end"]["conversations"] == 1, lines[-1]
        assert not [n for n in os.listdir(export) if n.startswith(".")], os.listdir(export)
        # The export is a stream `agentd import` takes: the log comes back whole.
        back = Agentd(start=False, lmdb=True)
        try:
            p = run_agentd("import", "--data", back.data_dir, "--input", os.path.join(export, idle + ".jsonl"),
                           capture_output=True, text=True, timeout=scaled(60))
            assert p.returncode == 0, p.stderr
            back.start()
            assert [(e["seq"], e["type"], e["content"]) for e in back.events(idle)] == \
                [(e["seq"], e["type"], e["content"]) for e in log_before], back.events(idle)
            assert back.ok({"op": "get", "conversation": idle})["conversation"]["status"] == "ended"
        finally:
            back.close()
        # What waits on a person is not idle, nor what waits for its scheduled wakeup: left alone.
        g = a.ok({"op": "get", "conversation": waiting})["conversation"]
        assert g["status"] == "suspended", g
        g = a.ok({"op": "get", "conversation": wakes})["conversation"]
        assert g["status"] == "idle", g
        assert metric(a, "agentd_retention_ended_total") >= 1
        assert metric(a, "agentd_retention_removed_total") >= 2
        assert metric(a, "agentd_retention_exported_total") >= 2
        assert metric(a, "agentd_retention_passes_total") >= 1
        assert "retention: a pass ended" in a.log(), a.log_tail()
        # A restart finds the store consistent.
        a.stop()
        p = run_agentd("check", *a.check_args(), capture_output=True, text=True, timeout=scaled(60))
        assert p.returncode == 0, p.stdout + p.stderr


def test_failed_export_keeps_the_conversation():
    with Agentd(start=False) as a:
        blocker = os.path.join(a.dir, "a-file")
        open(blocker, "w").close()
        a.write_config(retention_config(os.path.join(blocker, "sub")))  # not a directory: every export fails
        a.start()
        c = a.create()
        a.ok({"op": "update", "conversation": c, "status": "ended"})
        wait_for(lambda: f"retention: {c}: not removed: its export into" in a.log(), scaled(30),
                 "the failed export to be logged")
        assert a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "ended"
        assert "Not a directory" in a.log(), a.log_tail()


def test_bad_settings_refused():
    for cfg, want in [
        ("[agentd]\nremove_ended_after = 1d\nretention_export = relative/dir\n",
         "bad value 'relative/dir' for 'retention_export'"),
        ("[agentd]\nretention_export = /tmp\n", "retention_export is set but remove_ended_after is not"),
        ("[agentd]\nretention_interval = 10ms\n", "bad value '10ms' for 'retention_interval'"),
        ("[agentd]\nend_idle_after = soon\n", "bad value 'soon' for 'end_idle_after'"),
        ("[agentd]\nremove_ended_after = -1s\n", "bad value '-1s' for 'remove_ended_after'"),
    ]:
        harness.config_refused(cfg, want)


@harness.lmdb_only("agentd compact rewrites an LMDB data.mdb")
def test_compact_gives_disk_back():
    big = "x" * 200_000
    with Agentd(lmdb=True) as a:
        keep = a.create()
        for i in range(3):
            a.send(keep, f"keep {i}")
            wait_for(lambda: len(a.events(keep, type="assistant_msg")) > i, 30, "the kept conversation's answer")
        for i in range(30):
            c = a.create()
            a.send(c, big)
            a.ok({"op": "delete", "conversation": c})
        kept = a.events(keep)
        # While agentd runs, compact refuses and changes nothing.
        p = run_agentd("compact", "--data", a.data_dir, capture_output=True, text=True, timeout=scaled(60))
        assert p.returncode == 1 and "is running on" in p.stderr and "stop it first" in p.stderr, p.stderr
        a.stop()
        data = os.path.join(a.data_dir, "data.mdb")
        mode, size = os.stat(data).st_mode, os.path.getsize(data)
        p = run_agentd("compact", "--data", a.data_dir, capture_output=True, text=True, timeout=scaled(120))
        assert p.returncode == 0, p.stderr
        after = os.path.getsize(data)
        assert after * 4 < size, (size, after, p.stdout)
        assert f"data.mdb {size} bytes -> {after} bytes" in p.stdout, p.stdout
        assert os.stat(data).st_mode == mode
        assert not os.path.exists(os.path.join(a.data_dir, "compact.tmp"))
        p = run_agentd("check", "--data", a.data_dir, capture_output=True, text=True, timeout=scaled(60))
        assert p.returncode == 0, p.stdout + p.stderr
        a.start()
        assert a.events(keep) == kept
        a.send(keep, "after")
        wait_for(lambda: len(a.events(keep, type="assistant_msg")) == 4, 30, "an answer after the compaction")


def test_compact_usage():
    d = harness._mkdtemp()
    try:
        p = run_agentd("compact", "--data", os.path.join(d, "none"), capture_output=True, text=True)
        assert p.returncode == 1 and "no LMDB store in" in p.stderr, p.stderr
        p = run_agentd("compact", "--data", d, "extra", capture_output=True, text=True)
        assert p.returncode == 2 and "usage: agentd compact [--data DIR]" in p.stderr, p.stderr
        p = run_agentd("compact", "--help", capture_output=True, text=True)
        assert p.returncode == 0 and "agentd must be stopped" in p.stdout, p.stdout
    finally:
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    harness.main(globals())
