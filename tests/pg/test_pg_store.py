"""The PostgreSQL store under stress of its own (ctest pg_proc_store; docs/scale-out.md, "When the database
misbehaves"): processes racing to create the schema of one fresh database, a damaged schema, a database that
refuses writes, and a server restarted under agentd. Each ends with every acknowledged write present once.

The cluster is this file's own (harness, AGENTD_TEST_STORE=pg): the read-only test changes a server-wide setting
and the restart test restarts the server.
"""
import json
import os
import subprocess
import sys
import threading
import time

os.environ["AGENTD_TEST_STORE"] = "pg"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proc"))

import harness  # noqa: E402
from harness import AGENTD_BIN, Agentd, pg_sql, pg_target, run_agentd, scaled, wait_for  # noqa: E402

CLUSTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster.sh")
EMPTY_STREAM = ('{"agentd_export":2}\n'
                '{"end":{"conversations":0,"events":0,"summaries":0,"tool_calls":0,"model_calls":0,"runs":0}}\n')


def dbname(target):
    return target.rsplit("dbname=", 1)[1]


def check(target):
    p = run_agentd("check", "--store", target, capture_output=True, text=True, timeout=scaled(60))
    return p.returncode, p.stdout + p.stderr


def answered(a, c, seq):
    """Wait until the conversation's last event is an answer after seq."""
    wait_for(lambda: a.events(c)[-1]["type"] == "assistant_msg" and a.events(c)[-1]["seq"] > seq, 30,
             f"{c}'s answer after seq {seq}")


def send_answered(a, c, content, **fields):
    seq = a.send(c, content, **fields)
    answered(a, c, seq)
    return seq


# ---- the schema: created once by racing processes; damage named ----------------------------------------


def test_processes_opening_one_fresh_database_at_once_create_its_schema_once():
    """4 processes open (and create) the store of one fresh, empty schema at the same moment, 5 times over:
    each open succeeds, one schema_version row says 2 (version 1 created, then migrated to 2), and the tables are there once. (A store lives in the
    connection's current schema: a fresh schema is what a fresh database is to it, and is quicker to make.)"""
    with Agentd(start=False) as a:
        stream = os.path.join(a.dir, "empty.jsonl")
        with open(stream, "w") as f:
            f.write(EMPTY_STREAM)
        base = pg_target(os.path.join(a.dir, "race"))
        db = dbname(base)
        expected = None
        for round_ in range(5):
            schema = f"r{round_}"
            pg_sql(f"CREATE SCHEMA {schema}", db)
            target = f"{base} options=-csearch_path={schema}"
            # `agentd import` of an empty stream opens the store for writing (creating its schema) and
            # writes nothing; the processes start together, so their opens meet on the empty schema.
            procs = [subprocess.Popen([AGENTD_BIN, "import", "--store", target, "--input", stream],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(4)]
            for p in procs:
                out, err = p.communicate(timeout=scaled(60))
                assert p.returncode == 0, (round_, p.returncode, err)
            assert pg_sql(f"SELECT version FROM {schema}.schema_version", db) == "2", round_
            tables = pg_sql("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables "
                            f"WHERE schemaname = '{schema}'", db)
            expected = expected or tables
            assert tables == expected and "events" in tables and "runs" in tables, (round_, tables)
        rc, out = check(target)
        assert rc == 0 and "0 conversations" in out and "consistent" in out, out


DAMAGE = [
    # (break it, what agentd says, mend it)
    ("ALTER TABLE model_calls RENAME TO model_calls_away", "the table model_calls is missing",
     "ALTER TABLE model_calls_away RENAME TO model_calls"),
    ("ALTER TABLE events RENAME COLUMN content TO content_away", "the table events has no column content (bytea)",
     "ALTER TABLE events RENAME COLUMN content_away TO content"),
    ("ALTER TABLE warnings ALTER COLUMN at TYPE integer",
     "the column warnings.at is integer where agentd needs bigint",
     "ALTER TABLE warnings ALTER COLUMN at TYPE bigint"),
    ("ALTER INDEX events_event_id RENAME TO events_event_id_away", "the index events_event_id is missing",
     "ALTER INDEX events_event_id_away RENAME TO events_event_id"),
    ("ALTER SEQUENCE lease_seq RENAME TO lease_seq_away", "the sequence lease_seq is missing",
     "ALTER SEQUENCE lease_seq_away RENAME TO lease_seq"),
    ("ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_pkey", "the primary key tool_calls_pkey is missing",
     "ALTER TABLE tool_calls ADD PRIMARY KEY (id)"),
]


def test_a_damaged_schema_is_refused_naming_what_is_wrong():
    """A table, column, index or sequence of the schema missing or altered: agentd refuses to start and
    `agentd check` to read, each naming it; mended, the store serves again with nothing lost."""
    with Agentd(start=False) as a:
        a.start()
        c = a.create(conversation="keep")
        seqs = [send_answered(a, c, f"m{i}", event_id=f"k{i}") for i in range(3)]
        before = a.events(c)
        a.stop()
        target = pg_target(a.data_dir)
        db = dbname(target)
        for broken, said, mend in DAMAGE:
            pg_sql(broken, db)
            rc, out = check(target)
            assert rc != 0 and f"the store's schema is damaged: {said}" in out, (broken, rc, out)
            n = len(a.log())
            assert a.expect_exit() != 0, broken
            assert f"the store's schema is damaged: {said}" in a.log()[n:], (broken, a.log()[n:])
            pg_sql(mend, db)
        rc, out = check(target)
        assert rc == 0 and "consistent" in out, out
        a.start()
        assert a.events(c) == before and [e["seq"] for e in before if e["type"] == "user_msg"] == seqs
        assert send_answered(a, c, "again") == before[-1]["seq"] + 1


# ---- a database that refuses writes ------------------------------------------------------------------


def set_read_only(on):
    """default_transaction_read_only for every session of the cluster, the open ones too (a reload applies
    it to each session at its next statement)."""
    pg_sql("ALTER SYSTEM SET default_transaction_read_only = on" if on else
           "ALTER SYSTEM RESET default_transaction_read_only")
    pg_sql("SELECT pg_reload_conf()")


def user_msgs(a, c):
    return {e["event_id"]: e["seq"] for e in a.events(c) if e["type"] == "user_msg" and e.get("event_id")}


def assert_gapless_and_once(a, c, acked):
    evs = a.events(c)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1)), [e["seq"] for e in evs]
    ids = [e.get("event_id") for e in evs if e.get("event_id")]
    assert len(ids) == len(set(ids)), ids
    got = user_msgs(a, c)
    for eid, seq in acked.items():
        assert got.get(eid) == seq, (eid, seq, got.get(eid))


def test_a_read_only_database_refuses_writes_clearly_and_loses_nothing():
    """The database turns read-only under agentd: sends and creates answer `unavailable` saying so (nothing
    written), reads go on, and a worker in a turn cannot write its answer; once it takes
    writes again agentd and its workers carry on, every acknowledged send there once and answered."""
    with Agentd(start=False) as a:
        gate = a.gated_model()
        a.start()
        c = a.create(conversation="ro")
        acked = {}
        for i in range(3):
            acked[f"a{i}"] = send_answered(a, c, f"before {i}", event_id=f"a{i}")
        # A turn in flight when the database turns read-only: its model answers only once the gate opens.
        g = a.create(model="gated", conversation="in-flight")
        g_seq = a.send(g, "slow", event_id="g0")
        wait_for(lambda: a.ok({"op": "get", "conversation": g})["conversation"]["status"] == "active", 10,
                 "the gated turn running")
        mark = len(a.log())
        try:
            set_read_only(True)
            n = [0]

            def refused():
                n[0] += 1
                eid = f"r{n[0]}"
                r = a.request({"op": "send", "conversation": c, "content": "while read-only", "event_id": eid})
                if r["ok"]:
                    acked[eid] = r["seq"]  # sent before the setting reached agentd's session
                    return None
                return r
            r = wait_for(refused, 10, "a send refused")
            assert r["error"] == "unavailable" and "read-only" in r["message"] and \
                "nothing was written" in r["message"], r
            for i in range(3):
                r = a.request({"op": "send", "conversation": c, "content": "x", "event_id": f"ro{i}"})
                assert r["error"] == "unavailable" and "read-only" in r["message"], r
            r = a.request({"op": "create", "conversation": "new-while-ro", "settings": {"model": "echo"}})
            assert r["error"] == "unavailable", r
            # Reads are served meanwhile.
            assert a.ok({"op": "get", "conversation": c})["conversation"]["id"] == c
            assert len(a.events(c)) >= 6
            assert "refuses writes (its database is read-only)" in a.log()
            # The gated turn ends now: its worker cannot write (its lease check or its answer is refused).
            with open(gate, "w"):
                pass
            wait_for(lambda: "in-flight: worker" in a.log()[mark:] and "read-only: the store refuses writes" in
                     a.log()[mark:], 20, "the worker's write refused")
            assert [e["type"] for e in a.events(g)] == ["user_msg"], a.events(g)
        finally:
            set_read_only(False)
        eid = "after"

        def accepted():
            r = a.request({"op": "send", "conversation": c, "content": "after", "event_id": eid})
            return r["seq"] if r["ok"] else None
        acked[eid] = wait_for(accepted, 20, "a send accepted once the database takes writes")
        # Every acknowledged send is answered (a worker whose commit was refused ran its turn again).
        answered(a, c, acked[eid])
        assert_gapless_and_once(a, c, acked)
        answered(a, g, g_seq)  # the turn in flight ran again once writes were taken
        assert_gapless_and_once(a, g, {"g0": g_seq})
        assert not any(e.get("event_id", "").startswith("ro") for e in a.events(c))
        assert a.request({"op": "get", "conversation": "new-while-ro"})["error"] == "not_found"
        rc, out = check(pg_target(a.data_dir))
        assert rc == 0 and "consistent" in out, out


# ---- the server restarted under agentd ---------------------------------------------------------------


def test_a_server_restart_under_agentd_loses_no_acknowledged_write():
    """pg_ctl restart while clients send: sends meanwhile fail `unavailable` (the client retries them with the
    same event_id); agentd and its workers reconnect, every acknowledged send is there once and answered."""
    with Agentd(start=False) as a:
        a.start()
        convs = [a.create(conversation=f"rs{i}") for i in range(3)]
        acked, errors, stop = {}, [], threading.Event()

        def client(c):
            i = 0
            while not stop.is_set():
                eid = f"{c}-{i}"
                try:
                    r = a.request({"op": "send", "conversation": c, "content": f"m{i}", "event_id": eid},
                                  timeout=30)
                except (OSError, AssertionError) as e:
                    errors.append(repr(e))
                    time.sleep(0.05)
                    continue
                if r["ok"]:
                    acked[(c, eid)] = r["seq"]
                    i += 1
                else:
                    errors.append(r["error"])
                    time.sleep(0.05)  # the same event_id again: a retry
                time.sleep(0.02)
        threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in convs]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 9, 20, "sends before the restart")
        subprocess.run(["bash", CLUSTER, "restart", harness._pg["dir"]], check=True, capture_output=True,
                       timeout=scaled(60))
        n = len(acked)
        wait_for(lambda: len(acked) >= n + 9, 30, "sends accepted after the restart")
        stop.set()
        for t in threads:
            t.join(scaled(40))
        assert set(errors) <= {"unavailable"}, errors  # not internal, not a dropped connection
        for c in convs:
            answered(a, c, max(s for (cc, _), s in acked.items() if cc == c))
            assert_gapless_and_once(a, c, {e: s for (cc, e), s in acked.items() if cc == c})
        # A new conversation after it: created, run by a new worker, answered.
        c = a.create(conversation="after-restart")
        send_answered(a, c, "hello")
        rc, out = check(pg_target(a.data_dir))
        assert rc == 0 and "consistent" in out, out


harness.main(globals())
