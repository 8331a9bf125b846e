"""cancel and resume with the real agentd, workers and agentctl (docs/protocol.md, "Cancel and resume").
The scripted model and tool are described in turnsutil.py."""
import json

import harness
from harness import Agentd, pid_alive, wait_for
from turnsutil import conv_get, last_is, new_conv, records, release, setup, types


def fields(out):
    """agentctl's key: value lines as a dict of strings."""
    return dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in out.splitlines()))


def no_worker(a, c):
    return conv_get(a, c)["worker"] is None


def after_next_message(a, c, n_model):
    """Send "hi" and wait for its answer: the model has then been called exactly n_model times in all,
    which shows nothing re-ran the cancelled turn meanwhile (its re-run would be a call before "hi")."""
    a.send(c, "hi")
    wait_for(lambda: last_is(a, c, "assistant_msg", "re: hi"), 20, "the answer to hi")
    assert len(records(a.model_log)) == n_model, records(a.model_log)


# ---- cancel ----------------------------------------------------------------------------------------------


def test_cancel_a_model_turn_for_good():
    """Mid-model: `agentctl cancel` commits turn_cancelled, kills the model process and the worker, leaves
    the conversation idle with no worker, and the turn is never re-run (not even after a restart of
    agentd); the next user message is answered on its own."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "block b")
        rec = wait_for(lambda: records(a.model_log), 20, "the model call")[0]
        pid = wait_for(lambda: a.worker_pid(c), 10, "the worker")
        rc, out, _ = a.ctl("cancel", c)
        assert fields(out) == {"cancelled": "true", "seq": "2", "tool_calls": "[]"}, out
        wait_for(lambda: not pid_alive(pid) and not pid_alive(rec["pid"]), 10, "worker and model killed")
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg", "turn_cancelled"], evs
        assert evs[1]["content"] == {"context_seq": 1, "tool_calls": []}, evs[1]
        g = conv_get(a, c)
        assert g["status"] == "idle" and g["fsm_state"]["state"] == "idle", g
        wait_for(lambda: no_worker(a, c), 10, "no worker")
        release(a, "b")
        a.restart()
        assert conv_get(a, c)["status"] == "idle"
        after_next_message(a, c, 2)
        assert "released b" not in json.dumps(a.events(c))
        assert "crashed" not in a.log(), a.log_tail()


def test_cancel_a_running_tool():
    """Mid-tool: the tool's process is killed, its call settled `cancelled` (row and resolution event), a late
    resolve is `stale`, and the call is never dispatched again."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "tool")
        tool = wait_for(lambda: records(a.tool_log), 20, "the tool dispatch")[0]
        r = a.ok({"op": "cancel", "conversation": c})
        assert r["cancelled"] is True and r["tool_calls"] == [tool["id"]], r
        wait_for(lambda: not pid_alive(tool["pid"]), 10, "the tool killed")
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg", "assistant_msg", "tool_call", "resolution",
                                           "turn_cancelled"], evs
        assert evs[3]["content"]["status"] == "cancelled" and evs[3]["content"]["result"] is None, evs[3]
        assert evs[4]["seq"] == r["seq"] and evs[4]["content"]["tool_calls"] == [tool["id"]]
        tc = a.ok({"op": "tool_call", "tool_call_id": tool["id"]})["tool_call"]
        assert tc["status"] == "cancelled", tc
        late = a.request({"op": "resolve", "tool_call_id": tool["id"], "result": "late"})
        assert late["ok"] is False and late["error"] == "stale", late
        listed = a.ok({"op": "tool_calls", "conversation": c, "status": "cancelled"})["tool_calls"]
        assert [t["id"] for t in listed] == [tool["id"]]
        rc, out, _ = a.ctl("tool-calls", c, "--status", "cancelled")
        assert tool["id"] in out and "cancelled" in out, out
        release(a, "t")
        after_next_message(a, c, 2)
        assert len(records(a.tool_log)) == 1
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr


def test_cancel_a_suspended_turn():
    """Waiting on a person: the human call is settled cancelled (its expiry gone), the conversation idle; a
    late approval is stale."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "ask")
        wait_for(lambda: conv_get(a, c)["status"] == "suspended", 20, "suspended")
        call = a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"][0]
        r = a.ok({"op": "cancel", "conversation": c})
        assert r["tool_calls"] == [call["id"]], r
        assert a.ok({"op": "tool_call", "tool_call_id": call["id"]})["tool_call"]["deadline"] is None
        g = conv_get(a, c)
        assert g["status"] == "idle" and g["fsm_state"] == {"state": "idle", "pending": {}, "last_seq": r["seq"]}
        rc, out, err = a.ctl("approve", call["id"], check=False)
        assert rc == 1 and "stale" in (out + err), (out, err)
        after_next_message(a, c, 2)
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr


def test_cancel_idle_ended_and_bad_requests():
    """Idle: a no-op that says so (nothing written). Ended: conflict. Unknown: not_found. Ill-formed:
    bad_request. None of them changes the log."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "x")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: x"), 20, "the answer")
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 10, "idle")
        r = a.ok({"op": "cancel", "conversation": c})
        assert r["cancelled"] is False and "nothing cancelled" in r["message"], r
        rc, out, _ = a.ctl("cancel", c)
        assert fields(out)["cancelled"] == "false", out
        assert types(a, c) == ["user_msg", "assistant_msg"]
        a.ok({"op": "update", "conversation": c, "status": "ended"})
        r = a.request({"op": "cancel", "conversation": c})
        assert r["error"] == "conflict" and "ended" in r["message"], r
        r = a.request({"op": "cancel", "conversation": "nope"})
        assert r["error"] == "not_found" and "nope" in r["message"], r
        rc, out, err = a.ctl("cancel", "nope", check=False)
        assert rc == 1 and "not_found" in err, (out, err)
        for bad in ({"op": "cancel"}, {"op": "cancel", "conversation": "a b"},
                    {"op": "cancel", "conversation": c, "x": 1}, {"op": "cancel", "conversation": 5}):
            r = a.request(bad)
            assert r["error"] == "bad_request", (bad, r)
        assert types(a, c) == ["user_msg", "assistant_msg"]


# ---- resume ----------------------------------------------------------------------------------------------


def test_resume_after_stop():
    """A stopped conversation that owes its turn gets a worker from `resume` without any new event, and the
    turn completes; a second resume while it runs, or once it is idle, says why it does nothing."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "block b")
        wait_for(lambda: records(a.model_log), 20, "the model call")
        pid = a.worker_pid(c)
        assert a.ctl("stop", c)[1] == "stopping: true\n"
        wait_for(lambda: not pid_alive(pid) and no_worker(a, c), 10, "the worker stopped")
        assert conv_get(a, c)["status"] == "active"
        n = len(a.events(c))
        rc, out, _ = a.ctl("resume", c)
        assert fields(out) == {"resumed": "true", "rerun": "false"}, out
        wait_for(lambda: len(records(a.model_log)) == 2, 20, "the turn run again")
        r = a.ok({"op": "resume", "conversation": c})
        assert r["resumed"] is False and "already running" in r["message"], r
        release(a, "b")
        wait_for(lambda: last_is(a, c, "assistant_msg", "released b"), 20, "the answer")
        assert len(a.events(c)) == n + 1  # resume wrote no event of its own
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 10, "idle")
        wait_for(lambda: a.ctl("stop", c)[1] == "stopping: true\n", 10, "a stop")
        wait_for(lambda: no_worker(a, c), 10, "stopped")
        r = a.ok({"op": "resume", "conversation": c})
        assert r["resumed"] is False and "nothing is owed" in r["message"], r
        assert no_worker(a, c)


def test_resume_after_the_crash_loop_gave_up():
    """restart_limit = 2: a turn whose worker always dies ends in the give-up error (gave_up: true) and is
    not restarted; `resume` runs that turn again (rerun: true) without a new user message, and it
    completes once the cause is gone."""
    with setup(Agentd(start=False), "restart_limit = 2\nrestart_window = 60s\n") as a:
        c = new_conv(a)
        a.send(c, "crash")
        wait_for(lambda: last_is(a, c, "error"), 30, "the give-up")
        err = a.events(c)[-1]["content"]
        assert "crashed 2 times" in err["message"] and err["gave_up"] is True, err
        assert conv_get(a, c)["status"] == "idle"
        release(a, "nocrash")
        rc, out, _ = a.ctl("resume", c)
        assert fields(out) == {"resumed": "true", "rerun": "true"}, out
        wait_for(lambda: last_is(a, c, "assistant_msg", "survived"), 20, "the re-run turn")
        assert types(a, c) == ["user_msg", "error", "assistant_msg"]
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 10, "idle")
        r = a.ok({"op": "resume", "conversation": c})
        assert r["resumed"] is False, r


def test_resume_bad_requests():
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        r = a.ok({"op": "resume", "conversation": c})
        assert r["resumed"] is False and "nothing is owed" in r["message"], r
        a.ok({"op": "update", "conversation": c, "status": "ended"})
        r = a.request({"op": "resume", "conversation": c})
        assert r["error"] == "conflict" and "ended" in r["message"], r
        r = a.request({"op": "resume", "conversation": "nope"})
        assert r["error"] == "not_found", r
        rc, out, err = a.ctl("resume", "nope", check=False)
        assert rc == 1 and "not_found" in err, (out, err)
        for bad in ({"op": "resume"}, {"op": "resume", "conversation": ""}, {"op": "resume", "conversation": c, "after": 1}):
            assert a.request(bad)["error"] == "bad_request", bad
        assert types(a, c) == []


harness.main(globals())
