"""Hot backup (`agentd backup --data DIR PATH`, docs/operations.md): a compacted, consistent copy taken while
agentd serves and writes go on; `agentd check` passes on it, it holds every write acknowledged before the
backup began, and agentd serves from it. Bad targets are refused with a clear error and nothing written."""
import json
import os
import select
import subprocess
import threading
import time

import harness
from harness import AGENTD_BIN, Agentd


def backup(data, path, check=True):
    p = subprocess.run([AGENTD_BIN, "backup", "--data", data, path], capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p


def check_copy(path):
    chk = subprocess.run([AGENTD_BIN, "check", "--data", path], capture_output=True, text=True, timeout=120)
    assert chk.returncode == 0, (chk.stdout, chk.stderr)
    return chk.stdout


def test_backup_under_write_load_loses_nothing_acknowledged():
    with Agentd() as a:
        convs = [a.create(conversation=f"c{i}", metadata={"n": str(i)}) for i in range(4)]
        acked = {c: [] for c in convs}
        stop = threading.Event()
        errors = []

        def writer(c):
            try:
                with a.conn() as cl:
                    i = 0
                    while not stop.is_set():
                        r = cl.request({"op": "send", "conversation": c, "content": f"m{i}"})
                        assert r.get("ok") is True, r
                        acked[c].append(r["seq"])
                        i += 1
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(c,)) for c in convs]
        for t in threads:
            t.start()
        harness.wait_for(lambda: all(len(acked[c]) >= 20 for c in convs), 60, "writes under way")
        before = {c: max(acked[c]) for c in convs}  # acknowledged before the backup began
        bk = os.path.join(a.dir, "bk")
        p = backup(a.data_dir, bk)
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors
        assert "written to" in p.stdout, p.stdout
        assert os.listdir(bk) == ["data.mdb"], os.listdir(bk)
        chk = subprocess.run([AGENTD_BIN, "check", "--data", bk], capture_output=True, text=True, timeout=120)
        assert chk.returncode == 0, (chk.stdout, chk.stderr)
        # agentd serves from the copy: every event acknowledged before the backup is there
        with Agentd(data_dir=bk) as b:
            for c in convs:
                got = b.ok({"op": "get", "conversation": c})["conversation"]
                assert got["last_seq"] >= before[c], (c, got["last_seq"], before[c])
                assert got["metadata"] == {"n": c[1:]}
                # gapless; the copy's owed turn may be answered meanwhile, adding seqs after last_seq
                seqs = [e["seq"] for e in b.events(c, limit=10000)]
                assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= got["last_seq"], (c, got, seqs[-5:])


def test_backup_refuses_a_target_that_is_not_new_or_empty():
    with Agentd() as a:
        a.create(conversation="c1")
        full = os.path.join(a.dir, "full")
        os.makedirs(full)
        with open(os.path.join(full, "keep"), "w") as f:
            f.write("x")
        p = backup(a.data_dir, full, check=False)
        assert p.returncode == 1 and "is not empty: give a new or empty directory" in p.stderr, p.stderr
        assert os.listdir(full) == ["keep"]
        p = backup(a.data_dir, os.path.join(a.dir, "no", "such", "parent"), check=False)
        assert p.returncode == 1 and "cannot make" in p.stderr, p.stderr
        p = backup(os.path.join(a.dir, "nostore"), os.path.join(a.dir, "bk2"), check=False)
        assert p.returncode == 1 and "cannot open the store" in p.stderr, p.stderr
        assert not os.path.exists(os.path.join(a.dir, "bk2"))
        p = subprocess.run([AGENTD_BIN, "backup"], capture_output=True, text=True)
        assert p.returncode == 2 and "usage: agentd backup [--data DIR] PATH" in p.stderr, p.stderr
        # an empty existing directory is fine
        empty = os.path.join(a.dir, "empty")
        os.makedirs(empty)
        backup(a.data_dir, empty)
        a.ok({"op": "get", "conversation": "c1"})  # agentd still serves


def test_backup_op_under_write_load_loses_nothing_acknowledged():
    """The `backup` op (agentctl backup): agentd copies while it serves the writers."""
    with Agentd() as a:
        convs = [a.create(conversation=f"c{i}", metadata={"n": str(i)}) for i in range(4)]
        acked = {c: [] for c in convs}
        stop = threading.Event()
        errors = []

        def writer(c):
            try:
                with a.conn() as cl:
                    i = 0
                    while not stop.is_set():
                        r = cl.request({"op": "send", "conversation": c, "content": f"m{i}"})
                        assert r.get("ok") is True, r
                        acked[c].append(r["seq"])
                        i += 1
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(c,)) for c in convs]
        for t in threads:
            t.start()
        try:
            harness.wait_for(lambda: all(len(acked[c]) >= 20 for c in convs), 60, "writes under way")
            before = {c: max(acked[c]) for c in convs}
            # a relative PATH is agentctl's: made absolute against its working directory
            rc, out, err = a.ctl("backup", os.path.relpath(os.path.join(a.dir, "bk"), os.getcwd()), timeout=120)
            during = {c: len(acked[c]) for c in convs}
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors
        bk = os.path.join(a.dir, "bk")
        assert os.path.realpath(out.splitlines()[0].split()[1]) == os.path.realpath(bk), out
        assert int(out.split("bytes:")[1].split()[0]) == os.path.getsize(os.path.join(bk, "data.mdb")), out
        assert os.listdir(bk) == ["data.mdb"], os.listdir(bk)
        assert f"backup into {out.splitlines()[0].split()[1]} done" in a.log()
        assert "consistent" in check_copy(bk)
        assert all(during[c] > 20 for c in convs)
        with Agentd(data_dir=bk) as b:
            for c in convs:
                got = b.ok({"op": "get", "conversation": c})["conversation"]
                assert got["last_seq"] >= before[c], (c, got["last_seq"], before[c])
                assert got["metadata"] == {"n": c[1:]}
                seqs = [e["seq"] for e in b.events(c, limit=10000)]
                assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= got["last_seq"], (c, got, seqs[-5:])


def test_other_ops_are_answered_while_a_backup_runs():
    """A backup of a large store runs off the loop: a ping sent after it is answered before it, and a
    second backup meanwhile is refused busy."""
    with Agentd() as a:
        c = a.create(conversation="big")
        blob = "x" * (900 * 1024)
        with a.conn(timeout=120) as w:  # pipelined: the worker answers them in a turn or two
            n = 12
            w.raw("".join(json.dumps({"op": "send", "conversation": c, "content": blob + str(i)}) + "\n"
                          for i in range(n)).encode())
            for i in range(n):
                assert w.recv()["ok"] is True
        harness.wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 120,
                         "the echo answers")
        assert a.ok({"op": "status"})["store"]["size_bytes"] > 10 << 20
        with a.conn(timeout=120) as bc, a.conn() as pc:
            bc.send({"op": "backup", "path": os.path.join(a.dir, "bk"), "id": "b1"})
            harness.wait_for(lambda: "backup into " + os.path.join(a.dir, "bk") + " started" in a.log(), 10,
                             "the backup under way")
            r = pc.request({"op": "backup", "path": os.path.join(a.dir, "bk2")})
            assert r["error"] == "busy", r
            assert "a backup is already running" in r["message"], r
            t0 = time.monotonic()
            pong = pc.request({"op": "ping"})
            assert pong["ok"] is True
            g = pc.request({"op": "get", "conversation": c})
            assert g["ok"] is True
            # the backup's reply had not come while those were answered
            pending = not select.select([bc.sock], [], [], 0)[0]
            done = bc.recv()
            assert done["ok"] is True and done["id"] == "b1", done
            assert pending, f"the backup finished within {time.monotonic() - t0:.4f}s of the ping: too small a store"
        assert not os.path.exists(os.path.join(a.dir, "bk2")) or os.listdir(os.path.join(a.dir, "bk2")) == []
        assert done["bytes"] > 10 << 20, done
        assert "consistent" in check_copy(os.path.join(a.dir, "bk"))
        # one at a time, not one ever: the next backup runs
        a.ok({"op": "backup", "path": os.path.join(a.dir, "bk3")}, timeout=120)


def test_backup_op_refuses_bad_targets():
    with Agentd() as a:
        a.create(conversation="c1")
        full = os.path.join(a.dir, "full")
        os.makedirs(full)
        with open(os.path.join(full, "keep"), "w") as f:
            f.write("x")
        afile = os.path.join(a.dir, "afile")
        open(afile, "w").close()
        cases = [
            ({"path": full}, "bad_request", f"{full} is not empty: give a new or empty directory"),
            ({"path": afile}, "bad_request", f"{afile} is not a directory"),
            ({"path": os.path.join(a.dir, "no", "such")}, "bad_request", "cannot make"),
            ({"path": "rel/dir"}, "bad_request", "'path' must be absolute"),
            ({"path": ""}, "bad_request", "'path' must be a directory path"),
            ({"path": 3}, "bad_request", "'path' must be a directory path"),
            ({}, "bad_request", "missing field 'path'"),
            ({"path": full, "x": 1}, "bad_request", "unknown field 'x' for op 'backup'"),
        ]
        for fields, code, msg in cases:
            r = a.request(dict(op="backup", **fields), timeout=60)
            assert r["ok"] is False and r["error"] == code and msg in r["message"], (fields, r)
        assert os.listdir(full) == ["keep"] and os.path.getsize(afile) == 0
        assert not os.path.exists(os.path.join(a.dir, "no"))
        assert not os.path.exists(os.path.join(a.dir, "rel"))
        rc, out, err = a.ctl("backup", full, check=False)
        assert rc == 1 and err == f"agentctl: bad_request: {full} is not empty: give a new or empty directory\n", err
        rc, out, err = a.ctl("backup", check=False)
        assert rc == 2 and out == "", (out, err)
        # an empty existing directory is fine, and agentd still serves
        empty = os.path.join(a.dir, "empty")
        os.makedirs(empty)
        a.ok({"op": "backup", "path": empty}, timeout=60)
        assert os.listdir(empty) == ["data.mdb"]
        a.ok({"op": "get", "conversation": "c1"})


harness.main(globals())
