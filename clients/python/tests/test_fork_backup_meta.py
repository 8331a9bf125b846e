"""Metadata on create and update, list's filters, fork and backup through the sync and asyncio clients,
against the real agentd: what each sends and the typed result or error it gives back."""
import asyncio
import os
import subprocess

import pytest

from agentd_client import (AsyncClient, BackupResult, BadRequest, Busy, Client, Conflict, ForkResult, NotFound,
                           Unsupported, ERRORS)
from conftest import wait_for

import harness


def test_metadata_on_create_and_update_and_list_filters(agentd):
    with Client(agentd.socket) as c:
        c.create("echo", conversation="a", metadata={"team": "red", "env": "prod"})
        c.create("echo", conversation="b", metadata={"team": "red"})
        c.create("echo", conversation="z")
        assert c.get("a").metadata == {"team": "red", "env": "prod"}
        assert c.get("z").metadata == {} and c.get("z").forked_from is None
        c.update("b", metadata={"env": "prod", "team": None})
        assert c.get("b").metadata == {"env": "prod"}
        c.update("b", metadata={"owner": "ann"})
        assert c.get("b").metadata == {"env": "prod", "owner": "ann"}
        assert [x.id for x in c.list(metadata={"env": "prod"}).conversations] == ["a", "b"]
        assert [x.id for x in c.list(metadata={"env": "prod", "team": "red"}).conversations] == ["a"]
        page = c.list(metadata={"env": "prod"}, limit=1)
        assert [x.id for x in page.conversations] == ["a"] and page.next == "a"
        assert [x.id for x in c.list(metadata={"env": "prod"}, after=page.next).conversations] == ["b"]
        assert [x.id for x in c.list(model="echo").conversations] == ["a", "b", "z"]
        assert c.list(model="other").conversations == []
        t = c.get("b").updated_at
        assert [x.id for x in c.list(updated_after=t - 1).conversations] == ["b"]
        assert "b" not in [x.id for x in c.list(updated_before=t).conversations]
        c.send("z", "hi")
        wait_for(lambda: c.get("z").status == "idle" and c.get("z").last_seq == 2, 10, "z answered")
        assert [x.id for x in c.list(status="idle", metadata={"team": "red"}).conversations] == ["a"]
        with pytest.raises(BadRequest, match="'metadata.k' must be a string"):
            c.create("echo", conversation="bad", metadata={"k": 1})
        with pytest.raises(NotFound):
            c.get("bad")
        with pytest.raises(BadRequest, match="would have 17 keys"):
            c.update("a", metadata={f"k{i}": "v" for i in range(15)})
        assert c.get("a").metadata == {"team": "red", "env": "prod"}


def test_fork(agentd):
    with Client(agentd.socket) as c:
        c.create("echo", conversation="src", system="Be brief.", metadata={"team": "red"})
        c.send("src", "one")
        wait_for(lambda: c.get("src").last_seq == 2 and c.get("src").status == "idle", 10, "answered")
        r = c.fork("src", 2, new_conversation="f", system="Be long.")
        assert r == ForkResult("f", {"conversation": "src", "seq": 2}, 2, 2, 0, None, "idle"), r
        f = c.get("f")
        assert f.forked_from == {"conversation": "src", "seq": 2} and f.metadata == {"team": "red"}
        assert f.first_seq == 1 and r.first_seq == 1, (f, r)
        assert f.settings == {"model": "echo", "system": "Be long."}
        assert [e.content for e in c.events("f").events] == [e.content for e in c.events("src").events]
        g = c.fork("src", 1, metadata={"team": "blue"})
        assert g.conversation.startswith("c-") and g.status == "active" and g.last_seq == 1, g
        assert c.get(g.conversation).metadata == {"team": "blue"}
        with pytest.raises(Conflict, match="conversation f already exists"):
            c.fork("src", 1, new_conversation="f")
        with pytest.raises(BadRequest, match="seq 3 is past the last seq of src"):
            c.fork("src", 3)
        with pytest.raises(BadRequest, match="'seq' must be an integer from 1"):
            c.fork("src", 0)
        with pytest.raises(NotFound):
            c.fork("nope", 1)
        with pytest.raises(BadRequest, match="unknown model"):
            c.fork("src", 1, model="nosuch")
        assert sorted(x.id for x in c.list().conversations) == sorted(["src", "f", g.conversation])


def test_backup_and_its_errors(agentd, tmp_path):
    with Client(agentd.socket) as c:
        c.create("echo", conversation="a", metadata={"k": "v"})
        r = c.backup(str(tmp_path / "bk"))
        assert isinstance(r, BackupResult) and r.path == str(tmp_path / "bk") and r.ms >= 0
        assert r.bytes == os.path.getsize(tmp_path / "bk" / "data.mdb")
        chk = subprocess.run([harness.AGENTD_BIN, "check", "--data", str(tmp_path / "bk")], capture_output=True,
                             text=True, timeout=60)
        assert chk.returncode == 0, chk.stdout + chk.stderr
        with pytest.raises(BadRequest, match="is not empty"):
            c.backup(str(tmp_path / "bk"))
        # a relative path is this process's
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            assert c.backup("rel").path == str(tmp_path / "rel")
        finally:
            os.chdir(cwd)
        assert ERRORS["busy"] is Busy and ERRORS["unsupported"] is Unsupported


def test_busy_while_a_backup_runs(agentd, tmp_path):
    with Client(agentd.socket) as c:
        c.create("echo", conversation="big")
        blob = "x" * (900 * 1024)
        for i in range(12):
            c.send("big", blob + str(i))
        wait_for(lambda: c.get("big").status == "idle", 60, "the echo answers")
        one = str(tmp_path / "one")
        with harness.Client(agentd.socket, timeout=120) as raw:
            raw.send({"op": "backup", "path": one, "id": 1})
            wait_for(lambda: f"backup into {one} started" in agentd.log(), 10, "the first backup under way")
            with pytest.raises(Busy, match="a backup is already running"):
                c.backup(str(tmp_path / "two"))
            first = raw.recv()
        assert first["ok"] is True and first["bytes"] > 10 << 20, first
        assert not os.path.exists(tmp_path / "two") or os.listdir(tmp_path / "two") == []


def test_a_fork_after_a_summary_begins_after_it(agentd):
    with Client(agentd.socket) as c:
        c.create("echo", conversation="s")
        for i in range(2):
            c.send("s", f"m{i}")
            wait_for(lambda: c.get("s").last_seq == 2 * (i + 1) and c.get("s").status == "idle", 10, "answered")
        s = c.compact("s")
        assert s and s.to_seq == 3, s
        r = c.fork("s", 4, new_conversation="sf")
        assert (r.summary_to, r.first_seq, r.copied, r.last_seq) == (3, 4, 1, 4), r
        assert c.get("sf").first_seq == 4 and c.get("s").first_seq == 1
        page = c.events("sf", after=0)
        assert page.first_seq == 4 and [e.seq for e in page.events] == [4], page
        assert c.events("sf", after=3).first_seq is None


def test_async_fork_backup_and_metadata(agentd, tmp_path):
    async def main():
        async with AsyncClient(agentd.socket) as c:
            await c.create("echo", conversation="a", metadata={"team": "red"})
            await c.update("a", metadata={"env": "dev"})
            assert (await c.get("a")).metadata == {"team": "red", "env": "dev"}
            assert [x.id for x in (await c.list(metadata={"env": "dev"}, model="echo")).conversations] == ["a"]
            await c.send("a", "hi")
            for _ in range(1000):
                g = await c.get("a")
                if g.last_seq == 2 and g.status == "idle":
                    break
                await asyncio.sleep(0.01)
            r = await c.fork("a", 2, new_conversation="b")
            assert r.conversation == "b" and r.copied == 2 and r.status == "idle", r
            assert (await c.get("b")).forked_from == {"conversation": "a", "seq": 2}
            b = await c.backup(str(tmp_path / "bk"))
            assert b.bytes > 0 and os.path.exists(tmp_path / "bk" / "data.mdb")
    asyncio.run(main())
