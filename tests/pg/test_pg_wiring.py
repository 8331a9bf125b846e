"""agentd on a PostgreSQL store: what only PostgreSQL has (ctest pg_proc_wiring; docs/scale-out.md).

The rest of the process suite runs on PostgreSQL too (pg_proc_test_*); these are the bad targets, what
status, logs and the command line show of a target, and the connection limit.
"""
import ctypes
import os
import struct
import subprocess
import sys

os.environ["AGENTD_TEST_STORE"] = "pg"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proc"))

import harness  # noqa: E402
from harness import Agentd, pg_sql, pg_target, wait_for  # noqa: E402

F_OFD_SETLK = 37  # <fcntl.h>; Python's fcntl module has no OFD constants
F_WRLCK, F_UNLCK = 1, 2


def failed_start(tmp, *args):
    """agentd ARGS in tmp, expected to exit by itself: (status, what it printed)."""
    p = subprocess.run([harness.AGENTD_BIN, *args], capture_output=True, text=True, cwd=tmp,
                       timeout=harness.scaled(30))
    return p.returncode, p.stdout + p.stderr


def test_bad_targets_fail_clearly_and_leave_nothing():
    with Agentd(start=False) as a:
        run = os.path.join(a.dir, "run")
        prefix = pg_target(a.data_dir).rsplit(" dbname=", 1)[0]
        cases = [
            # (target, exit status, what the message must say)
            ("postgresql://agentd:sekrit@127.0.0.1:1/agentd", 1, "Connection refused"),
            ("postgresql://agentd:sekrit@localhost:notaport/agentd", 1, 'invalid integer value "notaport"'),
            (f"{prefix} user=no_such_role dbname=postgres", 1, 'role "no_such_role" does not exist'),
            (f"{prefix} dbname=no_such_db password=sekrit", 1, 'database "no_such_db" does not exist'),
        ]
        for target, rc, said in cases:
            got, out = failed_start(a.dir, "--store", target, "--run-dir", run)
            assert got == rc and said in out, (target, got, out)
            assert "cannot open the PostgreSQL store" in out, out
            assert "sekrit" not in out, out  # the password is never printed
            assert not os.path.exists(run), f"a failed start left {run} behind"
        # Usage errors: exit 2, before anything is opened.
        for args, said in [
            (["--store", "/var/lib/agentd"], "is not a PostgreSQL target"),
            (["--store", pg_target(a.data_dir), "--data", a.data_dir], "--data and --store both given"),
            (["--store", pg_target(a.data_dir), "--ephemeral"], "--ephemeral keeps an LMDB store"),
            (["--store", pg_target(a.data_dir), "--run-dir", ""], "--run-dir is an empty path"),
        ]:
            got, out = failed_start(a.dir, *args)
            assert got == 2 and said in out, (args, got, out)
        # A schema newer than this agentd's is refused, and left as it was.
        a.start()
        a.stop()
        db = pg_target(a.data_dir).rsplit("dbname=", 1)[1]
        pg_sql("UPDATE schema_version SET version = 3", db)
        assert a.expect_exit() == 1
        assert "the database's schema is version 3, newer than this agentd's (2): upgrade agentd" in a.log(), a.log()
        p = harness.run_agentd("check", "--store", pg_target(a.data_dir), capture_output=True, text=True)
        assert p.returncode == 2 and "newer than this agentd's" in p.stdout, p
        assert pg_sql("SELECT version FROM schema_version", db) == "3"
        pg_sql("UPDATE schema_version SET version = 2", db)
        a.start()


def test_check_status_and_what_is_shown_of_the_target():
    with Agentd(start=False) as a:
        target = pg_target(a.data_dir) + " password=sekrit"  # trust authentication: never asked for
        a.extra_args = ["--store", target]  # the last --store wins over the harness's
        a.start()
        c = a.create()
        a.send(c, "hello")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        st = a.ok({"op": "status"})["store"]
        assert st["backend"] == "postgresql" and st["path"].endswith("password=***"), st
        said = [ln for ln in a.log().splitlines() if not ln.startswith("--- harness:")]  # its command line
        assert not [ln for ln in said if "sekrit" in ln], said
        # The worker got the target from its environment, not on its command line (anyone's to read).
        a.send(c, "again")
        pid = wait_for(lambda: a.worker_pid(c), 10, "a live worker")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert not any(b"sekrit" in x or b"dbname" in x for x in argv), argv
        assert "agentd-worker" in os.readlink(f"/proc/{pid}/exe"), os.readlink(f"/proc/{pid}/exe")
        wait_for(lambda: len(a.events(c)) >= 4, 10, "the second reply")
        # The socket, pid file and locks are in the run directory; there is no LMDB store.
        names = set(os.listdir(a.data_dir))
        assert {"agentd.sock", "agentd.pid"} <= names and "data.mdb" not in names, names
        p = harness.run_agentd("check", "--store", target, capture_output=True, text=True)
        assert p.returncode == 0 and "1 conversations, 4 events" in p.stdout and "sekrit" not in p.stdout, p
        # A database without a store: check creates nothing and says so.
        pg_sql("CREATE DATABASE empty_one")
        empty = pg_target(a.data_dir).rsplit(" dbname=", 1)[0] + " dbname=empty_one"
        p = harness.run_agentd("check", "--store", empty, capture_output=True, text=True)
        assert p.returncode == 2 and "no agentd store in this database" in p.stdout, p
        assert pg_sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", "empty_one") == "0"
        p = harness.run_agentd("check", "--store", "/tmp/x", capture_output=True, text=True)
        assert p.returncode == 2 and "not a PostgreSQL target" in p.stderr, p


def connections(a):
    """Connections open to a's database (pg_stat_activity), the query's own left out."""
    db = pg_target(a.data_dir).rsplit("dbname=", 1)[1]
    return int(pg_sql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND pid <> pg_backend_pid()"))


def test_idle_workers_hold_no_connection():
    with Agentd(extra_args=["--idle-timeout", "5m"]) as a:
        convs = [a.create() for _ in range(6)]
        for c in convs:
            a.send(c, "hi")
        for c in convs:
            wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        pids = [a.worker_pid(c) for c in convs]
        assert all(pids), pids  # six live workers, waiting for their next message
        # Once they let go of the store, only agentd's own (its spares) remain.
        wait_for(lambda: connections(a) <= 2, 10, "the idle workers' connections to close")
        assert [a.worker_pid(c) for c in convs] == pids


def _ofd_lock(fd, typ, start):
    libc = ctypes.CDLL(None, use_errno=True)
    fl = ctypes.create_string_buffer(struct.pack("hhqqi4x", typ, 0, start, 1, 0))
    return libc.fcntl(fd, F_OFD_SETLK, fl)


def test_at_the_connection_limit_a_worker_waits_and_the_client_sees_no_error():
    with Agentd(config="[store]\nconnections = 1\n") as a:
        c0 = a.create()
        a.send(c0, "first")
        wait_for(lambda: len(a.events(c0)) >= 2, 10, "a reply below the limit")
        # Take the only slot as a busy worker would hold it.
        fd = os.open(os.path.join(a.data_dir, "connections.lock"), os.O_RDWR)
        try:
            assert wait_for(lambda: _ofd_lock(fd, F_WRLCK, 0) == 0, 10, "the slot to be free")
            c = a.create()
            assert a.send(c, "waits") == 1  # agentd itself commits the send: the client has its reply
            wait_for(lambda: "all 1 store connection slots are in use (connections in [store]): waiting" in a.log(),
                     10, "the waiting worker's log line")
            assert len(a.events(c)) == 1  # no answer while the worker waits
            assert a.ok({"op": "get", "conversation": c})["conversation"]["status"] != "error"
        finally:
            _ofd_lock(fd, F_UNLCK, 0)
            os.close(fd)
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the answer once a slot is free")
        assert a.events(c)[1]["content"]["text"] == "echo: waits"
        assert "got a store connection slot" in a.log()
        assert " error" not in a.log().split("waiting for one", 1)[1], a.log()


harness.main(globals())
