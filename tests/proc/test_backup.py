"""Hot backup (`agentd backup --data DIR PATH`, docs/operations.md): a compacted, consistent copy taken while
agentd serves and writes go on; `agentd check` passes on it, it holds every write acknowledged before the
backup began, and agentd serves from it. Bad targets are refused with a clear error and nothing written."""
import os
import subprocess
import threading

import harness
from harness import AGENTD_BIN, Agentd


def backup(data, path, check=True):
    p = subprocess.run([AGENTD_BIN, "backup", "--data", data, path], capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p


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


harness.main(globals())
