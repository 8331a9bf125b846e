"""Every op of the control protocol through the sync client, against the real agentd: the request it
sends and the typed result it gives back."""
import os

import pytest

from agentd_client import (DEFAULT_SOCKET, Client, Conversation, ConversationPage, Event, EventPage, ModelCall,
                           NotFound, Resolution, SendResult, Status, Summary, ToolCall, Usage, Worker,
                           socket_path)
from conftest import HUMAN_TOOL, wait_for


def answered(c, conv, n):
    return wait_for(lambda: c.events(conv).last_seq >= n and c.get(conv).status == "idle", 10,
                    f"{conv} at seq {n}, idle")


def test_ping_create_get_list(agentd):
    with Client(agentd.socket) as c:
        assert c.ping() == "0.1.0"
        conv = c.create("echo", conversation="c1", system="Be brief.", tools=["approve"],
                        params={"temperature": 0.2})
        assert conv == "c1"
        gen = c.create("echo")
        assert gen.startswith("c-") and len(gen) == 18, gen
        g = c.get("c1")
        assert isinstance(g, Conversation)
        assert g.id == "c1" and g.status == "idle" and g.last_seq == 0 and g.worker is None
        assert g.settings == {"model": "echo", "system": "Be brief.", "tools": ["approve"],
                              "params": {"temperature": 0.2}}
        assert isinstance(g.usage, Usage) and g.usage.input_tokens == 0
        assert g.created_at > 1.7e12 and g.updated_at >= g.created_at
        page = c.list()
        assert isinstance(page, ConversationPage) and page.next is None
        assert sorted(x.id for x in page.conversations) == sorted(["c1", gen])
        first = c.list(limit=1)
        assert len(first.conversations) == 1 and first.next == first.conversations[0].id
        rest = c.list(limit=1, after=first.next)
        assert [x.id for x in first.conversations + rest.conversations] == sorted(["c1", gen])
        assert c.list(status="ended").conversations == []


def test_send_events_and_the_worker(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        r = c.send(conv, "hello")
        assert isinstance(r, SendResult) and r.seq == 1 and r.duplicate is False
        assert r.event_id.startswith("py-")
        answered(c, conv, 2)
        page = c.events(conv)
        assert isinstance(page, EventPage) and page.last_seq == 2 and page.next_after is None
        e1, e2 = page.events
        assert isinstance(e1, Event) and (e1.seq, e1.type, e1.content, e1.event_id) == (1, "user_msg", {"text": "hello"},
                                                                                         r.event_id)
        assert (e2.type, e2.content) == ("assistant_msg", {"text": "echo: hello", "context_seq": 1})
        # an object as content is stored unchanged; a given event_id is used
        r2 = c.send(conv, {"text": "see attachment", "attachment": "a.pdf"}, event_id="m-1")
        assert (r2.seq, r2.duplicate, r2.event_id) == (3, False, "m-1")
        again = c.send(conv, "ignored: same event id", event_id="m-1")
        assert (again.seq, again.duplicate) == (3, True)
        answered(c, conv, 4)
        assert [e.seq for e in c.events(conv, after=1, before=4).events] == [2, 3]
        assert [e.seq for e in c.events(conv, limit=1).events] == [4]
        assert [e.seq for e in c.events(conv, type="user_msg").events] == [1, 3]
        assert c.events(conv, after=4, wait_ms=50).events == []
        w = c.get(conv).worker
        assert isinstance(w, Worker) and w.pid > 0
        st = c.status()
        assert isinstance(st, Status) and st.version == "0.1.0" and st.uptime_ms >= 0
        assert [(x.conversation, x.pid) for x in st.workers] == [(conv, w.pid)]
        assert st.store.path == agentd.data_dir and st.store.sync == "full" and st.store.size_bytes > 0
        assert c.stop(conv) is True
        wait_for(lambda: c.get(conv).worker is None, 10, "the worker hibernated")
        assert c.stop(conv) is False
        assert c.kill(conv) is None
        c.send(conv, "wake up")
        pid = wait_for(lambda: (c.get(conv).worker or Worker()).pid, 10, "a worker again")
        assert c.kill(conv, signal="TERM") == pid
        text = c.metrics()
        assert 'agentd_ops_total{op="send"} 4\n' in text, text


def test_update_end_delete(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo", system="one")
        assert c.update(conv, system="two", params={"k": 1}) is None
        assert c.get(conv).settings == {"model": "echo", "system": "two", "params": {"k": 1}}
        assert c.update(conv, end=True) is None
        assert c.get(conv).status == "ended"
        assert c.delete(conv) is True
        assert c.delete(conv) is False
        with pytest.raises(NotFound):
            c.get(conv)


def test_tool_calls_resolve_summary_compact_audit(start_agentd):
    a = start_agentd(HUMAN_TOOL + "[agentd]\naudit = on\n")
    with Client(a.socket) as c:
        conv = c.create("echo", tools=["approve"])
        c.send(conv, '/tool approve {"amount": 120}')
        pending = wait_for(lambda: c.tool_calls(conv, status="pending"), 10, "a pending approval")
        assert len(pending) == 1 and isinstance(pending[0], ToolCall)
        tc = c.tool_call(pending[0].id)
        assert tc == pending[0]
        assert (tc.conversation, tc.executor, tc.name, tc.status, tc.args, tc.prompt) == (
            conv, "human", "approve", "pending", {"amount": 120}, "Approve the payment?")
        assert tc.deadline > tc.inserted_at and tc.result is None and tc.resolved_at is None
        wait_for(lambda: c.get(conv).status == "suspended", 10, "the conversation suspended")
        r = c.resolve(tc.id, {"approved": True})
        assert isinstance(r, Resolution) and r.conversation == conv and r.seq == 5
        done = c.tool_call(tc.id)
        assert done.status == "resolved" and done.result == {"approved": True} and done.resolved_at
        assert c.tool_calls(conv, status="pending") == []
        answered(c, conv, 6)
        assert c.events(conv).events[-1].content["text"] == f'{tc.id} resolved: {{"approved":true}}'
        # errored, with a string result
        c.send(conv, "/tool approve {}")
        p2 = wait_for(lambda: c.tool_calls(conv, status="pending"), 10, "a second approval")[0]
        c.resolve(p2.id, "nobody may", status="errored")
        assert c.tool_call(p2.id).status == "errored"
        answered(c, conv, 12)
        assert c.summary(conv) is None
        s = c.compact(conv)
        assert isinstance(s, Summary) and s.from_seq == 1 and 1 < s.to_seq <= 12 and s.version == 1
        assert s.content["text"].startswith(f"summary of {s.to_seq} events")
        assert c.summary(conv).to_seq == s.to_seq
        calls = c.audit(conv)
        assert calls and all(isinstance(m, ModelCall) for m in calls)
        assert [m.task for m in calls] == ["turn"] * (len(calls) - 1) + ["summarize"]
        assert calls[0].turn_ref == 2 and calls[0].model == "echo" and isinstance(calls[0].usage, Usage)
        assert calls[0].rendered_context["messages"][0]["content"] == {"text": '/tool approve {"amount": 120}'}


def test_request_and_shutdown(agentd):
    c = Client(agentd.socket)
    assert c.request("ping")["version"] == "0.1.0"
    assert c.request("list", limit=5)["conversations"] == []
    assert c.shutdown() is None
    assert agentd.wait(20) == 0
    c.close()


def test_socket_path_order(agentd, monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTD_SOCKET", raising=False)
    assert socket_path() == DEFAULT_SOCKET == "./agentd-data/agentd.sock"
    # the default, relative to the current directory
    monkeypatch.chdir(tmp_path)
    os.symlink(os.path.dirname(agentd.socket), tmp_path / "agentd-data")
    assert Client().ping() == "0.1.0"
    # $AGENTD_SOCKET over the default; empty counts as unset
    monkeypatch.setenv("AGENTD_SOCKET", "")
    assert socket_path() == DEFAULT_SOCKET
    monkeypatch.setenv("AGENTD_SOCKET", agentd.socket)
    os.unlink(tmp_path / "agentd-data")
    assert Client().ping() == "0.1.0"
    # the argument over both
    assert socket_path("/x/y.sock") == "/x/y.sock"
    with pytest.raises(ValueError, match="longer than 107 bytes"):
        Client("/" + "x" * 107)


def test_one_client_shared_by_threads(agentd):
    import threading
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        results = {}

        def worker(n):
            results[n] = [c.send(conv, f"t{n}-{i}").seq for i in range(8)]

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seqs = [s for r in results.values() for s in r]
        assert len(seqs) == 32 and len(set(seqs)) == 32
        assert all(r == sorted(r) for r in results.values())
        texts = [e.content["text"] for e in c.events(conv, type="user_msg").events]
        assert sorted(texts) == sorted(f"t{n}-{i}" for n in range(4) for i in range(8))


def test_runs_cancel_resume(start_agentd):
    from agentd_client import Cancelled, Resumed, Run, RunPage
    a = start_agentd(start=False)
    gate = a.gated_model()
    a.start()
    with Client(a.socket) as c:
        conv = c.create("echo")
        for i in range(3):
            c.send(conv, f"m{i}")
            answered(c, conv, 2 * (i + 1))
        wait_for(lambda: len(c.runs(conv).runs) == 3 and c.runs(conv).runs[0].status == "completed", 10, "runs")
        page = c.runs(conv, limit=2)
        assert isinstance(page, RunPage) and [r.id for r in page.runs] == [3, 2] and page.next == 2
        r = page.runs[0]
        assert isinstance(r, Run) and (r.status, r.attempt, r.model, r.from_seq, r.to_seq, r.first_seq) == \
            ("completed", 1, "echo", 4, 5, 6)
        assert isinstance(r.usage, Usage) and r.ended_at >= r.started_at
        assert [x.id for x in c.runs(conv, before=page.next).runs] == [1]
        assert c.get(conv).run is None
        idle = c.cancel(conv)
        assert isinstance(idle, Cancelled) and idle.cancelled is False and "nothing" in idle.message
        res = c.resume(conv)
        assert isinstance(res, Resumed) and res.resumed is False and res.message  # its idle worker runs
        # A turn in progress: the gated model waits for its file.
        g = c.create("gated")
        c.send(g, "hi")
        run = wait_for(lambda: c.get(g).run, 10, "the run in progress")
        assert isinstance(run, Run) and run.status == "running" and run.ended_at is None
        done = c.cancel(g)
        assert done.cancelled is True and done.tool_calls == [] and done.seq == 2
        assert c.runs(g).runs[0].status == "cancelled"
        with pytest.raises(NotFound):
            c.runs("nope")
        with pytest.raises(NotFound):
            c.cancel("nope")
        with pytest.raises(NotFound):
            c.resume("nope")
    assert gate
