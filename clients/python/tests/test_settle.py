"""settle and pending against the real agentd: a call of a non-idempotent tool killed after its effect is
unknown, pending() lists it with kind "unknown" beside an approval, settle decides it (sync and async), and
bad settles raise the protocol's errors with nothing written."""
import asyncio
import json
import os
import signal

import pytest

from agentd_client import AsyncClient, BadRequest, Client, NotFound, Settlement, Stale
from conftest import HUMAN_TOOL, wait_for


def side_tool(a):
    """A side-effect tool: appends its tool_call_id, then waits for DIR/go."""
    tool = a.script("side.py", "import json, os, sys, time\nreq = json.load(sys.stdin)\n"
                    "open(sys.argv[1], 'a').write(req['tool_call_id'] + '\\n')\n"
                    "while not os.path.exists(sys.argv[1] + '.go'):\n    time.sleep(0.01)\nprint('{}')\n")
    eff = os.path.join(a.dir, "effects")
    return eff, f"\n[tool.side]\nexecutor = server\ncommand = python3 {tool} {eff}\ntimeout = 60s\n"


def unknown_call(a, c, conv, eff):
    before = len(c.events(conv, type="tool_call").events)
    c.send(conv, "/tool side {}")
    tcid = wait_for(lambda: c.events(conv, type="tool_call").events[before:], 10, "the call")[0].content["tool_call_id"]
    wait_for(lambda: os.path.exists(eff) and tcid in open(eff).read(), 10, "the effect")
    os.kill(c.get(conv).worker.pid, signal.SIGKILL)
    wait_for(lambda: c.tool_call(tcid).status == "unknown" and c.get(conv).status == "suspended", 20, "unknown")
    return tcid


def test_settle_and_pending(start_agentd):
    a = start_agentd(config=None, start=False)
    eff, cfg = side_tool(a)
    a.write_config(HUMAN_TOOL + cfg)
    a.start()
    with Client(a.socket) as c:
        conv = c.create("echo", tools=["side", "approve"])
        seq = c.get(conv).last_seq
        tcid = unknown_call(a, c, conv, eff)
        turn = c.wait_turn(conv, seq + 1, timeout=10)
        assert turn.status == "suspended" and turn.pending == [tcid], turn
        other = c.create("echo", tools=["approve"])
        c.send(other, "/tool approve {}")
        wait_for(lambda: len(c.pending()) == 2, 10, "two waiting")
        kinds = {t.id: t.kind for t in c.pending()}
        assert kinds[tcid] == "unknown" and sorted(kinds.values()) == ["approval", "unknown"], kinds
        assert [t.id for t in c.pending(conv)] == [tcid]
        assert [t.id for t in c.tool_calls(conv, status="unknown")] == [tcid]
        n = c.get(conv).last_seq
        with pytest.raises(BadRequest, match="outcome"):
            c.settle(conv, tcid, "maybe")
        with pytest.raises(BadRequest, match="not retry"):
            c.settle(conv, tcid, "retry", {"x": 1})
        with pytest.raises(NotFound):
            c.settle(other, tcid, "done")
        assert c.get(conv).last_seq == n
        r = c.settle(conv, tcid, "done", {"sent": True}, by="ann")
        assert isinstance(r, Settlement) and r.conversation == conv and r.outcome == "done", r
        ev = [e for e in c.events(conv).events if e.seq == r.seq][0]
        assert ev.content["result"] == {"sent": True} and ev.content["by"]["name"] == "ann", ev
        with pytest.raises(Stale):
            c.settle(conv, tcid, "done")
        open(eff + ".go", "w").close()

        async def retry_async():
            async with AsyncClient(a.socket) as ac:
                return await ac.settle(conv, t2, "retry")
        os.remove(eff + ".go")
        t2 = unknown_call(a, c, conv, eff)
        r = asyncio.run(retry_async())
        assert r.outcome == "retry"
        open(eff + ".go", "w").close()
        wait_for(lambda: c.tool_call(t2).status == "resolved", 20, "the retried call")
        assert open(eff).read().split().count(t2) == 2
