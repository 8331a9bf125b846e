"""The store under agentd, damaged and growing: a damaged record fails only what touches it (agentd keeps
serving everything else, never spins), and a map that grows while every process has it mapped never turns
into store_full for a worker. Damage is written with LMDB's own tools (mdb_dump, mdb_load), record layouts
as in store/store_lmdb.c."""
import json
import os
import subprocess
import threading
import time

import harness
from harness import Agentd, wait_for


def db_get(data, db, key):
    """The value (hex) stored under key (hex) in sub-database db."""
    out = subprocess.run(["mdb_dump", "-s", db, data], capture_output=True, text=True, check=True).stdout
    lines = out.split("HEADER=END\n", 1)[1].splitlines()
    for k, v in zip(lines[0::2], lines[1::2]):
        if k.strip() == key:
            return v.strip()
    raise AssertionError(f"no key {key} in {db}")


def db_put(data, db, key, val):
    dump = f"VERSION=3\nformat=bytevalue\ndatabase={db}\ntype=btree\nHEADER=END\n {key}\n {val}\nDATA=END\n"
    subprocess.run(["mdb_load", "-s", db, data], input=dump, text=True, check=True)


def conv_key(data, conv):
    """The conversation's number as its convs key (8 bytes big-endian, hex); conv_ids holds a msgpack uint."""
    v = bytes.fromhex(db_get(data, "conv_ids", conv.encode().hex()))
    n = v[0] if v[0] < 0x80 else int.from_bytes(v[1:], "big")
    return n.to_bytes(8, "big").hex()


def damage_conv(data, conv):
    """Make the conversation's record undecodable: a msgpack string where the record's array is."""
    db_put(data, "convs", conv_key(data, conv), "a178")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check(data):
    return harness.run_agentd("check", "--data", data, capture_output=True, text=True)


def suspended(a, convs, expires="1h"):
    """Start agentd with a human tool, leave each conversation waiting on one call, stop. {conv: call id}."""
    a.write_config(f"[tool.approve]\nexecutor = human\nprompt = Approve?\nexpires = {expires}\n")
    a.start()
    calls = {}
    for c in convs:
        a.create(conversation=c, settings={"model": "echo", "tools": ["approve"]})
        a.send(c, "/tool approve {}")
        calls[c] = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c})["tool_calls"], 10,
                            f"{c}'s pending call")[0]["id"]
    wait_for(lambda: all(a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "suspended"
                         for c in convs), 10, "every conversation suspended")
    a.stop()
    return calls


@harness.lmdb_only('writes damage into LMDB records with mdb_load')
def test_a_damaged_conversation_fails_only_the_writes_that_touch_it():
    # Before, the corrupt record poisoned the group transaction: every write of the iteration failed.
    with Agentd(start=False) as a:
        suspended(a, ("a", "b", "z"))
        damage_conv(a.data_dir, "b")
        a.start()
        with a.conn() as k:
            reqs = [{"op": "send", "conversation": "a", "content": "one", "id": 1},
                    {"op": "send", "conversation": "b", "content": "two", "id": 2},
                    {"op": "send", "conversation": "z", "content": "three", "id": 3},
                    {"op": "create", "conversation": "n1", "settings": {"model": "echo"}, "id": 4}]
            k.raw(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
            replies = {r["id"]: r for r in (k.recv() for _ in reqs)}
        assert replies[2]["ok"] is False and replies[2]["error"] == "internal", replies[2]
        assert "corrupt record" in replies[2]["message"], replies[2]
        assert all(replies[i]["ok"] for i in (1, 3, 4)), replies
        assert a.events("a")[-1]["content"] == {"text": "one"} and a.events("z")[-1]["content"] == {"text": "three"}
        assert a.ok({"op": "get", "conversation": "n1"})
        assert "a send of b met a damaged record: refused; 3 other write(s) retried without it" in a.log()
        r = a.request({"op": "get", "conversation": "b"})
        assert r["error"] == "internal" and "corrupt record" in r["message"], r


@harness.lmdb_only('writes damage into LMDB records with mdb_load')
def test_expiries_fire_past_a_damaged_conversation():
    # Before, the damaged conversation's due call failed the whole batch, retried every second for ever.
    with Agentd(start=False) as a:
        exp = harness.scaled(2)
        t0 = time.time()
        calls = suspended(a, ("b", "z"), expires=f"{int(exp * 1000)}ms")
        damage_conv(a.data_dir, "b")
        time.sleep(max(0, t0 + exp + 0.2 - time.time()))
        a.start()
        wait_for(lambda: a.ok({"op": "tool_call", "tool_call_id": calls["z"]})["tool_call"]["status"] == "expired",
                 10, "z's call to expire")
        line = f"tool call {calls['b']}: its records cannot be read (corrupt record; see agentd check): its deadline is dropped"
        wait_for(lambda: line in a.log(), 10, "b's deadline dropped")
        cpu0, w0 = cpu_seconds(a.pid), time.monotonic()
        time.sleep(harness.scaled(1))
        assert cpu_seconds(a.pid) - cpu0 < 0.25 * (time.monotonic() - w0), "agentd spins"
        assert a.log().count("its deadline is dropped") == 1


@harness.lmdb_only('writes damage into LMDB records with mdb_load')
def test_a_summary_past_the_log_stops_its_worker_loudly():
    # Before, the worker took the summary's to_seq as its last seq, found the log "moved" on every check and
    # asked for the write gate tens of thousands of times a second, with agentd granting each.
    with Agentd(config="[agentd]\nrestart_limit = 2\n") as a:
        a.create(conversation="b")
        a.send("b", "hi")
        wait_for(lambda: len(a.events("b")) >= 2, 10, "b's answer")
        a.stop()
        # summaries key (conversation number, to_seq); value [from_seq, to_seq, version, nil, content]
        db_put(a.data_dir, "summaries", conv_key(a.data_dir, "b") + (9).to_bytes(8, "big").hex(),
               "950109010081a474657874a178")
        rc = check(a.data_dir)
        assert rc.returncode == 1 and "summary 1-9" in rc.stdout, rc.stdout
        a.start()
        a.send("b", "again")
        err = wait_for(lambda: [e for e in a.events("b") if e["type"] == "error"], 30, "the error event")
        assert "crashed 2 times" in err[0]["content"]["message"], err
        assert "b: summary: corrupt record" in a.log(), a.log_tail()
        cpu0, w0 = cpu_seconds(a.pid), time.monotonic()
        time.sleep(harness.scaled(1))
        assert cpu_seconds(a.pid) - cpu0 < 0.25 * (time.monotonic() - w0), "agentd spins"


@harness.lmdb_only('writes damage into LMDB records with mdb_load')
def test_list_and_the_start_pass_over_a_damaged_record():
    # Before, one undecodable conversation record failed `list` for the whole store, and at start every
    # active conversation listed after it was left without a worker.
    with Agentd(start=False) as a:
        gate = a.gated_model()
        a.start()
        for c in ("a", "b"):
            a.create(conversation=c)
        a.create(conversation="zz", model="gated")
        a.send("zz", "mid-turn")
        wait_for(lambda: a.worker_pid("zz"), 10, "zz's worker")
        a.kill()  # mid-turn: zz stays active
        damage_conv(a.data_dir, "b")
        open(gate, "w").close()
        a.start()
        wait_for(lambda: len(a.events("zz")) == 2, 20, "zz revived and answered")
        r = a.ok({"op": "list"})
        assert [c["id"] for c in r["conversations"]] == ["a", "zz"], r
        assert "list: a conversation record cannot be decoded (see agentd check)" in a.log()
        assert "a record passed over" in a.log()
        rc = check(a.data_dir)
        assert rc.returncode == 1 and "corrupt record" in rc.stdout, rc.stdout


@harness.lmdb_only('writes damage into LMDB records with mdb_load')
def test_check_names_what_it_cannot_read_and_goes_on():
    # Before, a damaged conversation record was "store: listing conversations: corrupt record" (which one?),
    # and an undecodable event ended the check of its log with "events: corrupt record" and a false gap.
    with Agentd() as a:
        for c in ("a", "b", "c"):
            a.create(conversation=c)
            a.send(c, "one")
            wait_for(lambda: len(a.events(c)) >= 2, 10, f"{c}'s answer")
            a.send(c, "two")
            wait_for(lambda: len(a.events(c)) >= 4, 10, f"{c}'s second answer")
        a.stop()
        damage_conv(a.data_dir, "b")
        # events key (conversation number, seq); seq 2 of c gets a value that is no event record
        db_put(a.data_dir, "events", conv_key(a.data_dir, "c") + (2).to_bytes(8, "big").hex(), "a178")
        rc = check(a.data_dir)
        out = rc.stdout
        assert rc.returncode == 1, out
        assert "b: conversation record: corrupt record" in out, out
        assert "c: events: the record of seq 2 (or the first after it): corrupt record" in out, out
        assert "follows" not in out and "log ends at" not in out, out  # seqs 3 and 4 were read after it
        assert "3 conversations, 7 events" in out and "2 problem(s)" in out, out


@harness.lmdb_only("LMDB's event_ids table, damaged with mdb_load")
def test_check_verifies_the_idempotency_index():
    # A damaged event_ids row would let a retried send be appended a second time (or answer another event's
    # seq); `agentd check` did not look at the index at all.
    with Agentd() as a:
        a.create(conversation="i")
        assert a.send("i", "one", event_id="e-1") == 1
        wait_for(lambda: len(a.events("i")) == 2, 10, "the answer")
        assert a.send("i", "two", event_id="e-2") == 3
        wait_for(lambda: len(a.events("i")) == 4, 10, "the second answer")
        a.stop()
        assert check(a.data_dir).returncode == 0
        # event_ids key (conversation number, event_id); value the seq (msgpack)
        db_put(a.data_dir, "event_ids", conv_key(a.data_dir, "i") + b"e-2".hex(), "01")
        rc = check(a.data_dir)
        assert rc.returncode == 1 and "i: seq 3: its event_id e-2 is indexed to seq 1" in rc.stdout, rc.stdout


@harness.lmdb_only("LMDB's index tables, damaged with mdb_load")
def test_check_finds_index_rows_and_tool_call_rows_that_lead_nowhere():
    # `agentd check` went from the log to the index and to the rows, never back: an index row naming a seq
    # without its event_id, and a tool call row left behind by a deleted conversation, went unreported.
    with Agentd(start=False) as a:
        calls = suspended(a, ["t"])
        row = db_get(a.data_dir, "tool_calls", calls["t"].encode().hex())
        a.start()
        a.create(conversation="i")
        assert a.send("i", "one", event_id="e-1") == 1
        wait_for(lambda: len(a.events("i")) == 2, 10, "the answer")
        a.ok({"op": "delete", "conversation": "t"})
        a.stop()
        assert check(a.data_dir).returncode == 0
        # event_ids key (conversation number, event_id) -> seq 2, the answer, which has no event_id
        db_put(a.data_dir, "event_ids", conv_key(a.data_dir, "i") + b"ghost".hex(), "02")
        db_put(a.data_dir, "tool_calls", calls["t"].encode().hex(), row)
        rc = check(a.data_dir)
        out = rc.stdout
        assert rc.returncode == 1, out
        assert "i: the idempotency index sends event_id ghost to seq 2, which holds no event with it" in out, out
        assert f"store: tool call row {calls['t']} (conversation t) is not in any conversation's index" in out, out
        assert "2 problem(s)" in out, out


@harness.lmdb_only('a data.mdb that is not a store')
def test_a_store_that_is_not_one_is_named_at_start_and_by_check():
    with Agentd(start=False) as a:
        os.makedirs(a.data_dir, exist_ok=True)
        rc = check(a.data_dir)
        assert rc.returncode == 2 and "there is no store there (no data.mdb)" in rc.stdout, rc.stdout
        with open(os.path.join(a.data_dir, "data.mdb"), "wb") as f:
            f.write(b"not an LMDB file" * 512)
        rc = check(a.data_dir)
        assert rc.returncode == 2 and "its data.mdb is not an agentd store of this version, or is damaged" \
            in rc.stdout, rc.stdout
        assert a.expect_exit() != 0
        assert "its data.mdb is not an agentd store of this version, or is damaged" in a.log(), a.log()


def test_started_with_standard_descriptors_closed():
    # Started with 0, 1 and 2 closed, agentd's pid file, lock.mdb and data.mdb took those numbers: its
    # "listening" line went into lock.mdb (the worker could not open the store, the send was never
    # answered, `agentd check` called the store damaged) and its log lines to "stderr" into data.mdb.
    if harness.VALGRIND:
        return  # valgrind keeps descriptors of its own; the plain run covers agentd
    with Agentd(start=False) as a:
        a.launcher = [a.script("closed.py", """
            import os, sys
            for fd in (0, 1, 2):
                os.close(fd)
            os.execvp(sys.argv[1], sys.argv[1:])
            """)]
        a.start()
        for fd in (0, 1, 2):
            assert os.readlink(f"/proc/{a.pid}/fd/{fd}") == "/dev/null", fd
        c = a.create()
        a.send(c, "hi")
        wait_for(lambda: len(a.events(c)) == 2, 10, "the answer")
        pid = a.worker_pid(c)
        assert pid and all(os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/null" for fd in (0, 1, 2))
        rc = check(a.data_dir)
        assert rc.returncode == 0 and "consistent" in rc.stdout, rc.stdout
        a.stop()
        rc = check(a.data_dir)
        assert rc.returncode == 0 and "1 conversations, 2 events" in rc.stdout, rc.stdout


@harness.lmdb_only('the modes of data.mdb, lock.mdb and flush.lock')
def test_a_umask_never_takes_the_owners_access():
    # Under umask 0277 the data directory was created r-x and the store files read-only: as any user but
    # root, agentd could not lock its pid file ("Permission denied") nor a worker open the store.
    with Agentd(start=False) as a:
        data = os.path.join(a.dir, "fresh")
        a.launcher = [a.script("umask.py", """
            import os, sys
            os.umask(0o277)
            os.execvp(sys.argv[1], sys.argv[1:])
            """)]
        a.data_dir = data  # created by agentd itself
        a.start()
        modes = {n: os.stat(os.path.join(data, n)).st_mode & 0o777
                 for n in ("data.mdb", "lock.mdb", "flush.lock", "agentd.pid")}
        assert os.stat(data).st_mode & 0o777 == 0o700, oct(os.stat(data).st_mode)
        assert modes == {"data.mdb": 0o600, "lock.mdb": 0o600, "flush.lock": 0o600, "agentd.pid": 0o600}, modes
        c = a.create()
        a.send(c, "hi")
        wait_for(lambda: len(a.events(c)) == 2, 10, "the answer")


def test_a_data_path_that_is_no_directory_is_named():
    # Before: "cannot lock DIR/agentd.pid: Not a directory" and "cannot create the data directory : ...".
    with Agentd(start=False) as a:
        f = os.path.join(a.dir, "afile")
        open(f, "w").close()
        # (an empty path is a usage error, exit 2: test_agentctl.py's test_command_line_corners)
        r = harness.run_agentd("--data", f, "--socket", os.path.join(a.dir, "x.sock"), capture_output=True,
                               text=True, timeout=10)
        assert r.returncode == 1 and f"the data directory {f} is not a directory" in r.stderr, r
        assert os.path.getsize(f) == 0


@harness.lmdb_only("LMDB's meta record, damaged with mdb_load")
def test_create_never_takes_a_number_in_use():
    # With meta's next_conv behind the conversations (damage), create took conversation a's number: the new
    # conversation got a's log and overwrote its record.
    with Agentd(start=False) as a:
        suspended(a, ("a", "b"))
        db_put(a.data_dir, "meta", "next_conv".encode().hex(), "01")
        a.start()
        a.create(conversation="new")
        assert a.events("new") == []
        assert a.ok({"op": "get", "conversation": "a"})["conversation"]["id"] == "a"
        ids = [c["id"] for c in a.ok({"op": "list"})["conversations"]]
        assert sorted(ids) == ["a", "b", "new"], ids
        a.stop()
        assert check(a.data_dir).returncode == 0


@harness.lmdb_only("LMDB's map and its growth")
def test_the_map_grows_under_concurrent_workers_without_store_full():
    # map_size 128k, allowed 256m: it grows many times while agentd and eight workers have it mapped. Before,
    # a worker whose map was smaller than the data met MDB_MAP_FULL and its turn ended in a store_full error.
    with Agentd(config="[agentd]\nmap_size = 128k\nmax_map_size = 256m\n") as a:
        convs = [a.create(conversation=f"c{i}") for i in range(8)]
        errs = []

        def client(c):
            for j in range(30):
                r = a.request({"op": "send", "conversation": c, "content": "x" * 3000 + str(j)})
                if not r["ok"]:
                    errs.append(r)

        ts = [threading.Thread(target=client, args=(c,)) for c in convs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs, errs[:3]
        wait_for(lambda: all(a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle"
                             for c in convs), 60, "every conversation idle")
        errors = [e for c in convs for e in a.events(c, limit=1000) if e["type"] == "error"]
        assert not errors, errors[:3]
        assert "exited with status 6" not in a.log(), a.log_tail()
        assert a.ok({"op": "status"})["store"]["map_size"] > 128 << 10
        a.stop()
        assert check(a.data_dir).returncode == 0


harness.main(globals())
