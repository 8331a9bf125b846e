"""Turn control with the real agentd, workers and agentctl: an operator's kill is not a crash, and the loop
cap (max_tool_rounds). The scripted model and tool are described in turnsutil.py."""
import json

import harness
from harness import Agentd, pid_alive, wait_for
from turnsutil import conv_get, last_is, new_conv, records, release, setup, types


# ---- kill is not a crash -------------------------------------------------------------------------------


def test_operator_kills_never_reach_the_crash_loop_limit():
    """restart_limit = 2: four `agentctl kill` of a worker mid-turn each revive it at once and re-run the
    turn; none counts as a crash, so no "crashed N times" error ends the conversation, and the turn
    completes once released."""
    with setup(Agentd(start=False), "restart_limit = 2\nrestart_window = 60s\n") as a:
        c = new_conv(a)
        a.send(c, "block b1")
        for i in range(1, 5):
            wait_for(lambda: len(records(a.model_log)) >= i, 20, f"model call {i}")
            pid = wait_for(lambda: a.worker_pid(c), 10, "a worker")
            rc, out, _ = a.ctl("kill", c)
            assert out == f"pid: {pid}\n", out
            wait_for(lambda: not pid_alive(pid), 10, "the killed worker to go")
        wait_for(lambda: len(records(a.model_log)) >= 5, 20, "the turn run a fifth time")
        release(a, "b1")
        wait_for(lambda: last_is(a, c, "assistant_msg", "released b1"), 20, "the released answer")
        assert "error" not in types(a, c), a.events(c)
        assert "crashed" not in a.log(), a.log_tail()
        assert conv_get(a, c)["status"] == "idle"


# ---- loop cap --------------------------------------------------------------------------------------------


def test_loop_cap_stops_a_model_that_always_calls_a_tool():
    """settings.max_tool_rounds = 3: three rounds call the tool, then an `error` says why and no fourth
    model call is made; the next user message starts a new turn with fresh rounds."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, max_tool_rounds=3)
        a.send(c, "loop")
        wait_for(lambda: last_is(a, c, "error"), 30, "the loop cap's error")
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg"] + ["assistant_msg", "tool_call", "tool_result"] * 3 + \
            ["error"], evs
        err = evs[-1]["content"]
        assert "max_tool_rounds = 3" in err["message"] and "3 model rounds" in err["message"], err
        assert err["context_seq"] == evs[-2]["seq"], err
        assert [e["content"].get("round", 1) for e in evs if e["type"] == "assistant_msg"] == [1, 2, 3]
        assert len(records(a.model_log)) == 3
        assert len(records(a.tool_log)) == 3
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 10, "idle after the cap")
        # The next user event starts fresh: three rounds again, then the cap.
        a.send(c, "loop again")
        wait_for(lambda: types(a, c).count("error") == 2, 30, "the second cap")
        assert len(records(a.model_log)) == 6
        # Lowering the cap by update applies to the next turn.
        a.ok({"op": "update", "conversation": c, "settings": {"max_tool_rounds": 1}})
        a.send(c, "loop once")
        wait_for(lambda: types(a, c).count("error") == 3, 30, "the third cap")
        assert len(records(a.model_log)) == 7
        assert "max_tool_rounds = 1" in a.events(c)[-1]["content"]["message"]


def test_loop_cap_default_from_the_configuration():
    """[agentd] max_tool_rounds = 2 applies to conversations without the setting; a turn that stops calling
    tools within the cap is not touched."""
    with setup(Agentd(start=False), "max_tool_rounds = 2\n") as a:
        c = new_conv(a)
        a.send(c, "loop")
        wait_for(lambda: last_is(a, c, "error"), 30, "the cap's error")
        assert types(a, c).count("assistant_msg") == 2
        assert "max_tool_rounds = 2" in a.events(c)[-1]["content"]["message"]
        d = new_conv(a)
        a.send(d, "tool")
        release(a, "t")
        wait_for(lambda: last_is(a, d, "assistant_msg", "after"), 30, "the tool turn's answer")
        assert "error" not in types(a, d)


def test_loop_cap_bad_values():
    """A max_tool_rounds that is not an integer from 1 is refused as bad_request on create and update
    (nothing changed); in the configuration agentd refuses to start and names the key."""
    with setup(Agentd(start=False)) as a:
        for bad in (0, -1, "5", 1.5, 1000001, None, True):
            r = a.request({"op": "create", "settings": {"model": "m", "max_tool_rounds": bad}})
            assert r["ok"] is False and r["error"] == "bad_request", r
            assert "max_tool_rounds" in r["message"], r
        c = new_conv(a, max_tool_rounds=4)
        r = a.request({"op": "update", "conversation": c, "settings": {"max_tool_rounds": 0}})
        assert r["error"] == "bad_request", r
        assert conv_get(a, c)["settings"]["max_tool_rounds"] == 4
        rc, out, err = a.ctl("raw", json.dumps({"op": "update", "conversation": c,
                                                "settings": {"max_tool_rounds": "x"}}), check=False)
        assert rc == 1 and "max_tool_rounds" in out, (rc, out, err)
    b = Agentd(start=False)
    try:
        b.write_config("[agentd]\nmax_tool_rounds = 0\n")
        assert b.expect_exit() != 0
        assert "max_tool_rounds" in b.log(), b.log()
    finally:
        b.close()


harness.main(globals())
