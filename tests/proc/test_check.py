"""agentd check on the runs table and the expiry-warning rows (docs/operations.md): a store agentd made is
consistent; then each kind of damage, planted with the backend's own tools (LMDB's mdb_load, record layouts as
in store/store_lmdb.c; PostgreSQL's psql), is named: a run of no conversation, a turn's attempts with a gap,
two running runs of one conversation, a running run of an ended conversation, and warning rows of a settled
call (stale), of a call without a deadline, and of no call at all."""
import re
import struct
import subprocess

import harness
from harness import PG, Agentd, pg_sql, pg_target, wait_for

CONFIG = """
[tool.approve]
executor = human
prompt = Approve?
expires = 1h
warn_before = 10m
[tool.note]
executor = human
prompt = Note?
expires = 0
"""


# ---- msgpack, as much as the records need ----------------------------------

def mp_uint(v):
    return bytes([v]) if v < 0x80 else b"\xcf" + struct.pack(">Q", v)


def mp_int(v):
    return b"\xd3" + struct.pack(">q", v)


def mp_str(s):
    b = s.encode()
    assert len(b) < 32
    return bytes([0xa0 | len(b)]) + b


def run_record(status, attempt, from_seq, to_seq):
    """A runs value: [status, attempt, from, to, first, last, model, in, out, cost, started, ended]."""
    ended = 0 if status == 0 else 1700000000001
    return (b"\x9c" + mp_uint(status) + mp_uint(attempt) + mp_uint(from_seq) + mp_uint(to_seq) + mp_uint(0) +
            mp_uint(0) + mp_str("echo") + mp_uint(0) + mp_uint(0) + b"\xcb" + struct.pack(">d", 0.0) +
            mp_int(1700000000000) + mp_int(ended))


# ---- LMDB: mdb_dump / mdb_load ----------------------------------------------

def db_get(data, db, key):
    out = subprocess.run(["mdb_dump", "-s", db, data], capture_output=True, text=True, check=True).stdout
    lines = out.split("HEADER=END\n", 1)[1].splitlines()
    for k, v in zip(lines[0::2], lines[1::2]):
        if k.strip() == key:
            return v.strip()
    raise AssertionError(f"no key {key} in {db}")


def db_put(data, db, key, val):
    dump = f"VERSION=3\nformat=bytevalue\ndatabase={db}\ntype=btree\nHEADER=END\n {key}\n {val}\nDATA=END\n"
    subprocess.run(["mdb_load", "-s", db, data], input=dump, text=True, check=True)


def conv_num(data, conv):
    v = bytes.fromhex(db_get(data, "conv_ids", conv.encode().hex()))
    return v[0] if v[0] < 0x80 else int.from_bytes(v[1:], "big")


class Damage:
    """Plants rows in the store under agentd a (stopped), on its backend."""

    def __init__(self, a):
        self.a = a
        if PG:
            self.db = re.search(r"dbname=(\S+)", pg_target(a.data_dir)).group(1)

    def run(self, conv, rid, status, attempt, from_seq, to_seq):
        """A runs row; conv None: of a conversation that does not exist."""
        if PG:
            ended = 0 if status == 0 else 1700000000001
            pg_sql(f"INSERT INTO runs (conv, id, status, attempt, from_seq, to_seq, first_seq, last_seq, model, "
                   f"in_tok, out_tok, cost, started_at, ended_at) VALUES ('{conv or 'ghost'}', {rid}, {status}, "
                   f"{attempt}, {from_seq}, {to_seq}, 0, 0, 'echo'::bytea, 0, 0, 0, 1700000000000, {ended})",
                   dbname=self.db)
        else:
            num = conv_num(self.a.data_dir, conv) if conv else 999
            key = struct.pack(">QQ", num, rid).hex()
            db_put(self.a.data_dir, "runs", key, run_record(status, attempt, from_seq, to_seq).hex())

    def warning(self, call, conv, at):
        if PG:
            pg_sql(f"INSERT INTO warnings (tool_call_id, at, conv) VALUES ('{call}', {at}, '{conv}')",
                   dbname=self.db)
        else:
            db_put(self.a.data_dir, "warnings", (struct.pack(">Q", at) + call.encode()).hex(), mp_str(conv).hex())
            db_put(self.a.data_dir, "warning_at", call.encode().hex(), mp_uint(at).hex())

    def schedule(self, sid, conv, due, cron=None):
        """A schedule row and its due index entry."""
        if PG:
            spec = f"'{cron}'" if cron else "NULL"
            pg_sql(f"INSERT INTO schedules (id, conv, due, cron, text) VALUES ('{sid}', '{conv}', {due}, {spec}, "
                   f"'wake'::bytea)", dbname=self.db)
        else:
            rec = b"\x94" + mp_str(conv) + mp_int(due) + (mp_str(cron) if cron else b"\xc0") + mp_str("wake")
            db_put(self.a.data_dir, "schedules", sid.encode().hex(), rec.hex())
            db_put(self.a.data_dir, "schedule_due", (struct.pack(">Q", due) + sid.encode()).hex(), mp_str(conv).hex())


def check(a):
    return harness.run_agentd("check", *a.check_args(), capture_output=True, text=True,
                              timeout=harness.scaled(60))


def status(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]["status"]


def runs(a, c):
    return a.ok({"op": "runs", "conversation": c})["runs"]


def test_check_names_damaged_runs_and_warning_rows():
    with Agentd(config=CONFIG) as a:
        for c in ("a", "b", "c"):
            a.create(conversation=c)
        for i in range(2):
            a.send("a", f"m{i}")
            wait_for(lambda: len(runs(a, "a")) == i + 1 and runs(a, "a")[0]["status"] == "completed", 10,
                     "a's turn")
        for c in ("b", "c"):
            a.send(c, "hi")
            wait_for(lambda: runs(a, c) and runs(a, c)[0]["status"] == "completed" and status(a, c) == "idle", 10,
                     f"{c}'s turn")
        a.ok({"op": "update", "conversation": "c", "status": "ended"})
        # h: an approval with a deadline and a warning, settled (its warning row goes with it); n: a call
        # without a deadline
        a.create(conversation="h", settings={"model": "echo", "tools": ["approve"]})
        a.create(conversation="n", settings={"model": "echo", "tools": ["note"]})
        calls = {}
        for c in ("h", "n"):
            a.send(c, f"/tool {'approve' if c == 'h' else 'note'} {{}}")
            calls[c] = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c})["tool_calls"], 10,
                                f"{c}'s call")[0]
            wait_for(lambda: status(a, c) == "suspended", 10, f"{c} suspended")
        assert calls["h"]["deadline"] and calls["n"]["deadline"] is None, calls
        a.ok({"op": "resolve", "tool_call_id": calls["h"]["id"], "result": {"ok": True}})
        wait_for(lambda: status(a, "h") == "idle", 10, "h answered")
        a.stop()
        p = check(a)
        assert p.returncode == 0 and "consistent" in p.stdout, (p.stdout, p.stderr)

        d = Damage(a)
        d.run(None, 1, 1, 1, 0, 1)                # a run whose conversation is gone
        d.run("a", 3, 1, 3, 4, 5)                 # attempt 3 after a's run 2 (another turn, attempt 1)
        d.run("b", 2, 0, 1, 3, 4)                 # two running runs of b
        d.run("b", 3, 0, 1, 5, 6)
        d.run("c", 2, 0, 1, 3, 4)                 # running, and c is ended
        d.warning(calls["h"]["id"], "h", 1700000000000)  # the call is resolved: a stale warning row
        d.warning(calls["n"]["id"], "n", 1700000000000)  # the call has no deadline
        d.warning("tc-ghost", "h", 1700000000000)        # no such call
        p = check(a)
        out = p.stdout
        assert p.returncode == 1, (out, p.stderr)
        assert "store: run 1 (completed, attempt 1) belongs to no conversation" in out, out
        assert "a: run 3: attempt 3 does not follow the run before it" in out, out
        assert "b: runs 2 and 3 are both running: at most one run of a conversation is" in out, out
        assert "c: run 2 is running but the conversation is ended" in out, out
        assert f"h: expiry warning of tool call {calls['h']['id']}, which is resolved: a stale warning row" in out, out
        assert f"n: expiry warning of tool call {calls['n']['id']}, which has no deadline" in out, out
        assert "h: expiry warning of tool call tc-ghost: no such tool call" in out, out
        assert "7 problem(s)" in out, out


def test_schedule_rows_are_checked():
    with Agentd() as a:
        a.create(conversation="s")
        a.ok({"op": "schedule", "conversation": "s", "text": "ok", "after": 86400000, "cron": "0 9 * * *"})
        a.stop()
        p = check(a)
        assert p.returncode == 0 and "consistent" in p.stdout, (p.stdout, p.stderr)
        d = Damage(a)
        d.schedule("s-ghost", "ghost", 1700000000000)              # its conversation does not exist
        d.schedule("s-badcron", "s", 1700000000001, "61 * * * *")  # its spec does not parse
        p = check(a)
        out = p.stdout
        assert p.returncode == 1, (out, p.stderr)
        assert "store: schedule s-ghost names conversation ghost: there is none" in out, out
        assert "store: schedule s-badcron: its cron spec '61 * * * *' does not parse: minute" in out, out
        assert "2 problem(s)" in out, out


def test_ending_a_conversation_ends_its_running_run():
    # A run left running in an ended conversation would stay so for good (no worker starts for it again):
    # ending it ends the run interrupted, and check finds nothing.
    with Agentd(start=False) as a:
        a.gated_model()
        a.start()
        a.create(conversation="e", model="gated")
        a.send("e", "hi")
        wait_for(lambda: runs(a, "e") and runs(a, "e")[0]["status"] == "running", 10, "the run started")
        a.ok({"op": "update", "conversation": "e", "status": "ended"})
        assert runs(a, "e")[0]["status"] == "interrupted", runs(a, "e")
        a.stop()
        p = check(a)
        assert p.returncode == 0 and "consistent" in p.stdout, (p.stdout, p.stderr)


harness.main(globals())
