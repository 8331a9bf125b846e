"""Runs (one per model turn attempt) with the real agentd, workers and agentctl: recorded with the turn, the
active one in `get`, listed newest first with a cursor, interrupted by a kill -9 and re-run as the next
attempt, ended by cancel and by a crash-loop give-up. The scripted model and tool are described in
turnsutil.py."""
import os
import select
import signal
import subprocess

import harness
from harness import Agentd, pid_alive, wait_for
from turnsutil import conv_get, last_is, new_conv, records, release, setup


def runs(a, c, **kw):
    return a.ok({"op": "runs", "conversation": c, **kw})["runs"]


def active_run(a, c):
    return conv_get(a, c)["run"]


def test_runs_record_each_turn():
    """A plain turn and a tool turn: each model turn is one completed run with the seqs it answered and
    appended, its model, usage and times; `get` shows no run between turns."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        assert runs(a, c) == [] and active_run(a, c) is None
        a.send(c, "x")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: x"), 20, "the answer")
        r = wait_for(lambda: runs(a, c), 10, "a run")
        assert len(r) == 1, r
        r = r[0]
        assert {k: r[k] for k in ("id", "status", "attempt", "from_seq", "to_seq", "first_seq", "last_seq",
                                  "model")} == {"id": 1, "status": "completed", "attempt": 1, "from_seq": 0,
                                                "to_seq": 1, "first_seq": 2, "last_seq": 2, "model": "m"}, r
        assert r["usage"] == {"input_tokens": 1, "output_tokens": 1, "cost": 0}, r
        assert r["ended_at"] >= r["started_at"] > 0, r
        a.send(c, "tool")  # seq 3; the turn appends assistant_msg 4 and tool_call 5
        wait_for(lambda: records(a.tool_log), 20, "the tool")
        r2 = runs(a, c)[0]
        assert (r2["id"], r2["status"], r2["from_seq"], r2["to_seq"], r2["first_seq"], r2["last_seq"]) == \
            (2, "completed", 2, 3, 4, 5), r2
        assert active_run(a, c) is None  # the tool runs: no model turn is in progress
        release(a, "t")
        wait_for(lambda: last_is(a, c, "assistant_msg", "after"), 20, "the answer to the result")
        r3 = runs(a, c)[0]
        assert (r3["id"], r3["from_seq"], r3["to_seq"], r3["first_seq"]) == (3, 4, 6, 7), r3
        rc, out, _ = a.ctl("runs", c)
        lines = out.splitlines()
        assert lines[0].split() == ["ID", "STATUS", "ATTEMPT", "MODEL", "FROM", "TO", "FIRST", "LAST", "STARTED",
                                    "ENDED"], out
        assert [ln.split()[0] for ln in lines[1:]] == ["3", "2", "1"], out


def test_kill_9_mid_turn_interrupts_the_run_and_attempt_2_completes():
    """A kill -9 of the worker from outside agentd while the model runs: the run stays running in the store
    (the worker could not say anything), the revived worker marks it interrupted and runs the same turn as
    attempt 2, which completes; one answer in the log. `get` shows the active run meanwhile."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "block b")
        wait_for(lambda: records(a.model_log), 20, "the model call")
        run = active_run(a, c)
        assert run and run["status"] == "running" and run["attempt"] == 1 and run["ended_at"] is None, run
        pid = a.worker_pid(c)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: len(records(a.model_log)) == 2, 20, "the turn run again")
        r = runs(a, c)
        assert [(x["id"], x["status"], x["attempt"]) for x in r] == [(2, "running", 2), (1, "interrupted", 1)], r
        assert (r[0]["from_seq"], r[0]["to_seq"]) == (r[1]["from_seq"], r[1]["to_seq"]) == (0, 1), r
        assert r[1]["ended_at"] is not None and r[1]["first_seq"] is None
        assert active_run(a, c)["id"] == 2
        rc, out, _ = a.ctl("runs", c)
        assert "interrupted" in out and "running" in out, out
        release(a, "b")
        wait_for(lambda: last_is(a, c, "assistant_msg", "released b"), 20, "the answer")
        r = runs(a, c)
        assert [(x["id"], x["status"], x["attempt"]) for x in r] == [(2, "completed", 2), (1, "interrupted", 1)], r
        assert [e["type"] for e in a.events(c)] == ["user_msg", "assistant_msg"]
        assert active_run(a, c) is None


def test_cancel_and_give_up_end_the_run():
    """cancel ends the running run `cancelled`; a crash loop given up leaves it `interrupted`, and the turn
    run again by `resume` is its next attempt."""
    with setup(Agentd(start=False), "restart_limit = 2\nrestart_window = 60s\n") as a:
        c = new_conv(a)
        a.send(c, "block b")
        wait_for(lambda: active_run(a, c), 20, "the run")
        a.ok({"op": "cancel", "conversation": c})
        r = runs(a, c)
        assert [(x["id"], x["status"]) for x in r] == [(1, "cancelled")] and r[0]["ended_at"], r
        assert active_run(a, c) is None
        d = new_conv(a)
        a.send(d, "crash")
        wait_for(lambda: last_is(a, d, "error"), 30, "the give-up")
        r = runs(a, d)
        assert [(x["status"], x["attempt"]) for x in r] == [("interrupted", 2), ("interrupted", 1)], r
        release(a, "nocrash")
        a.ok({"op": "resume", "conversation": d})
        wait_for(lambda: last_is(a, d, "assistant_msg", "survived"), 20, "the re-run")
        r = runs(a, d)
        assert [(x["id"], x["status"], x["attempt"]) for x in r][0] == (3, "completed", 3), r


def test_watch_streams_run_starts_and_ends():
    """A watcher gets {"run": ...} when a run starts (status running, before any event of the turn) and when
    it ends (after the events of the commit that ends it); the runs before the watch began are not news.
    Only a watch that asks (`runs: true`, `agentctl watch --runs`) gets them; agentctl prints `- run {...}`."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "x")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: x"), 20, "a first turn")
        wait_for(lambda: runs(a, c) and runs(a, c)[0]["status"] == "completed", 10, "its run ended")
        plain = a.watch(c)  # without runs: only events, as before
        w = a.conn()
        r = w.request({"op": "watch", "conversation": c, "runs": True})
        assert r["ok"] is True, r
        a.send(c, "block b")
        lines = [w.recv(20) for _ in range(2)]
        assert lines[0]["event"]["type"] == "user_msg", lines
        assert lines[1]["run"]["status"] == "running" and lines[1]["run"]["id"] == 2, lines
        assert lines[1]["run"]["ended_at"] is None and lines[1]["run"]["from_seq"] == 2, lines
        release(a, "b")
        lines = [w.recv(20) for _ in range(2)]
        assert lines[0]["event"]["type"] == "assistant_msg", lines
        r = lines[1]["run"]
        assert (r["id"], r["status"], r["first_seq"], r["last_seq"]) == (2, "completed", 4, 4), lines
        w.close()
        assert [plain.recv(10)["event"]["type"] for _ in range(2)] == ["user_msg", "assistant_msg"]
        plain.close()
        for bad in ("yes", 1, None):
            r = a.request({"op": "watch", "conversation": c, "runs": bad})
            assert r["error"] == "bad_request" and "runs" in r["message"], r
        # agentctl: replaying from seq 0 shows the watch is in place before the next turn starts.
        p = subprocess.Popen([harness.AGENTCTL_BIN, "-s", a.socket, "watch", c, "--after", "0", "--runs"],
                             stdout=subprocess.PIPE)
        try:
            out = b""

            def lines_until(pred, what):
                nonlocal out

                def more():
                    nonlocal out
                    if select.select([p.stdout], [], [], 0.05)[0]:
                        chunk = os.read(p.stdout.fileno(), 65536)
                        assert chunk, out
                        out += chunk
                    return pred(out.decode().splitlines())
                return wait_for(more, 20, what)

            lines_until(lambda ls: len(ls) >= 4, "the replayed events")
            a.send(c, "again")
            lines_until(lambda ls: any(ln.startswith("- run ") and '"completed"' in ln for ln in ls), "the run end")
            runs_lines = [ln for ln in out.decode().splitlines() if ln.startswith("- run ")]
            assert len(runs_lines) in (1, 2) and '"id":3' in runs_lines[-1], out  # started and ended between reads: 1
            assert "re: again" in out.decode(), out
        finally:
            p.terminate()
            p.wait()


def test_runs_paging_and_bad_requests():
    """Newest first, `limit` and the `next` cursor (`before`), in the op and in agentctl; every bad input is
    a clear error."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        for i in range(5):
            a.send(c, f"m{i}")
            wait_for(lambda: last_is(a, c, "assistant_msg", f"re: m{i}"), 20, f"answer {i}")
        wait_for(lambda: len(runs(a, c)) == 5, 10, "five runs")
        r = a.ok({"op": "runs", "conversation": c, "limit": 2})
        assert [x["id"] for x in r["runs"]] == [5, 4] and r["next"] == 4, r
        r = a.ok({"op": "runs", "conversation": c, "limit": 2, "before": r["next"]})
        assert [x["id"] for x in r["runs"]] == [3, 2] and r["next"] == 2, r
        r = a.ok({"op": "runs", "conversation": c, "limit": 2, "before": 2})
        assert [x["id"] for x in r["runs"]] == [1] and "next" not in r, r
        rc, out, _ = a.ctl("runs", c, "--limit", "2", "--before", "4")
        lines = out.splitlines()
        assert [ln.split()[0] for ln in lines[1:]] == ["3", "2", "next:"] and lines[-1] == "next: 2", out
        for bad in ({"before": 0}, {"before": -1}, {"before": "4"}, {"limit": 0}, {"limit": 1001}, {"after": 1},
                    {"conversation": "a b"}):
            req = {"op": "runs", "conversation": c, **bad}
            r = a.request(req)
            assert r["ok"] is False and r["error"] == "bad_request", (bad, r)
        r = a.request({"op": "runs", "conversation": "nope"})
        assert r["error"] == "not_found" and "nope" in r["message"], r
        rc, out, err = a.ctl("runs", "nope", check=False)
        assert rc == 1 and "not_found" in err, (out, err)
        rc, out, err = a.ctl("runs", c, "--before", "x", check=False)
        assert rc == 2, (rc, out, err)
        a.ok({"op": "delete", "conversation": c})
        assert a.request({"op": "runs", "conversation": c})["error"] == "not_found"


harness.main(globals())
