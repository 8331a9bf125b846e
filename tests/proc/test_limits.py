"""Resource exhaustion: the map filling up, the disk filling up, the descriptor limit, the worker
limit, and a model writing far more than its cap. In each: a clear error to whoever asked, agentd goes on
serving, and nothing committed is lost."""
import errno
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time

import harness
from harness import Agentd, wait_for

SHORT_MODEL = """
import json, sys
json.load(sys.stdin)
print(json.dumps({"text": "ok"}))
"""


def fill_until_full(a, c, size):
    """Send messages of `size` bytes until the store refuses one; returns the acked seqs."""
    acked = []
    blob = "x" * size
    for i in range(10000):
        r = a.request({"op": "send", "conversation": c, "content": blob, "event_id": f"e{i}"})
        if not r["ok"]:
            assert r["error"] == "store_full", r
            assert "full" in r["message"], r
            return acked, i
        acked.append((f"e{i}", r["seq"]))
    raise AssertionError("the store never filled")


@harness.lmdb_only("LMDB's map at max_map_size")
def test_map_full_is_store_full_and_nothing_is_lost():
    with Agentd(start=False) as a:
        model = a.script("short.py", SHORT_MODEL)
        cfg = f"""
            [agentd]
            map_size = 2m
            max_map_size = 2m
            [model.short]
            command = python3 {model}
            """
        a.write_config(cfg)
        a.start()
        c = a.create(model="short")
        acked, failed_at = fill_until_full(a, c, 60000)
        assert len(acked) > 5, acked
        # Reads go on, and every acknowledged send is there exactly once.
        evs = a.events(c)
        ids = [e.get("event_id") for e in evs if e["type"] == "user_msg"]
        for eid, seq in acked:
            assert ids.count(eid) == 1, eid
        assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
        assert a.ok({"op": "ping"})["version"]
        # A retry of the refused send after the limit is raised succeeds (the map grows).
        a.stop()
        a.write_config(cfg.replace("max_map_size = 2m", "max_map_size = 64m"))
        a.start()
        r = a.ok({"op": "send", "conversation": c, "content": "x" * 60000, "event_id": f"e{failed_at}"})
        assert "duplicate" not in r, r
        got = [e for e in a.events(c) if e.get("event_id") == f"e{failed_at}"]
        assert len(got) == 1 and got[0]["seq"] == r["seq"], got
        rc = harness.run_agentd("check", "--data", a.data_dir, capture_output=True, text=True)
        assert rc.returncode == 0, rc.stdout


@harness.lmdb_only('a full disk under the LMDB data directory')
def test_revival_whose_commit_fails_starts_no_worker():
    """A send to a conversation without a worker forks its worker while the send's commit flushes
    (supervisor/workers.c, commit_spawning); the worker waits for go before it reads anything. When that commit
    fails (here: the disk is full, which shows at the commit's writes), the forked worker is killed and reaped at
    once: the send is refused with store_full, no worker runs for the conversation, no zombie is left, and nothing
    counts as a spawn or a crash."""
    with SmallDisk() as mnt:
        if not mnt:
            print("SKIP test_revival_whose_commit_fails_starts_no_worker: cannot mount a small tmpfs (needs root)")
            return
        with Agentd(data_dir=os.path.join(mnt, "data"), start=False) as a:
            model = a.script("short.py", SHORT_MODEL)
            a.write_config(f"[model.short]\ncommand = python3 {model}\n")
            a.start()
            c = a.create(model="short", conversation="late")  # never sent to: no worker
            filler = a.create(model="short")
            fill_until_full(a, filler, 100000)
            text = a.ok({"op": "metrics"})["text"]
            spawns = int(re.search(r"^agentd_worker_spawns_total (\d+)$", text, re.M).group(1))
            for i in range(3):
                r = a.request({"op": "send", "conversation": c, "content": "x" * 100000, "event_id": f"late-{i}"})
                assert not r["ok"] and r["error"] == "store_full", r
            assert "late: worker" not in a.log(), a.log_tail()
            assert a.worker_pid(c) is None
            late = [p for p in a.children() if b"late" in open(f"/proc/{p}/cmdline", "rb").read()]
            assert late == [], late
            wait_for(lambda: not a.zombies(), 5, "no zombie")
            text = a.ok({"op": "metrics"})["text"]
            assert f"agentd_worker_spawns_total {spawns}\n" in text, text
            assert "agentd_worker_crashes_total 0\n" in text, text
            assert a.events(c) == []
            assert a.ok({"op": "ping"})


@harness.lmdb_only("LMDB's map at max_map_size")
def test_expiries_in_a_full_store_are_retried_without_spinning():
    """Deadlines that passed together fire in one transaction. When the store has no room for it, the batch is
    retried in halves, and one that fails alone is retried a second later. Before, the timer was re-armed to the
    passed deadline and agentd retried the same batch without pause (thousands of failures a second). Once the
    operator gives the store room (a larger max_map_size, here), every deadline fires, once."""
    if harness.scaled(1) > 3:
        print("SKIP test_expiries_in_a_full_store_are_retried_without_spinning: "
              "60 workers under valgrind take too long to set up")
        return
    n = 60
    with Agentd(start=False) as a:
        model = a.script("short.py", SHORT_MODEL)
        expires = harness.scaled(8.0)  # room for 60 creates, 60 sends and the fill on a loaded machine
        cfg = f"""
            [agentd]
            map_size = 3m
            max_map_size = 3m
            [model.short]
            command = python3 {model}
            [tool.approve]
            executor = human
            prompt = Approve?
            expires = {int(expires * 1000)}ms
            """
        a.write_config(cfg)
        a.start()
        convs = [a.create(conversation=f"x{i}", settings={"model": "echo", "tools": ["approve"]}) for i in range(n)]
        for c in convs:
            a.send(c, '/tool approve {"what": "%s"}' % ("y" * 2000))
        deadlines = []
        for c in convs:
            calls = wait_for(lambda: [tc for tc in a.ok({"op": "tool_calls", "conversation": c})["tool_calls"]
                                      if tc["deadline"]], 20, f"{c}'s pending call")
            deadlines.append(calls[0]["deadline"])
        filler = a.create(model="short")
        fill_until_full(a, filler, 20000)
        fill_until_full(a, filler, 2000)
        assert time.time() * 1000 < min(deadlines), "a deadline passed before the store was full: test too slow"
        # Every deadline passes while agentd is stopped: they come due together, as after a restart.
        a.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: time.time() * 1000 > max(deadlines) + 200, expires + 20, "every deadline to pass")
        finally:
            a.proc.send_signal(signal.SIGCONT)

        def expired():
            return sum(1 for c in convs if any(e["type"] == "resolution" for e in a.events(c)))
        wait_for(lambda: "expiries failed" in a.log() or expired() == n, 10, "the expiries to fire or fail")
        t0 = time.time()
        time.sleep(harness.scaled(3))
        failed = a.log().count("expiries failed")
        assert failed <= time.time() - t0 + 3, (failed, a.log_tail())
        assert f"store full firing {n} expiries: retrying in batches of {n // 2}" in a.log(), a.log_tail()
        assert a.ok({"op": "ping"})
        # Room: the operator raises the limit. What did not fire, fires on the next start.
        a.stop()
        a.write_config(cfg.replace("max_map_size = 3m", "max_map_size = 64m"))
        a.start()
        wait_for(lambda: expired() == n, 20, "every expiry")
        for c in convs:
            res = [e for e in a.events(c) if e["type"] == "resolution"]
            assert len(res) == 1 and res[0]["content"]["status"] == "expired", res
        rc = harness.run_agentd("check", "--data", a.data_dir, capture_output=True, text=True)
        assert rc.returncode == 0, rc.stdout


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@harness.lmdb_only('plants rows with mdb_load')
def test_expiry_rows_that_cannot_fire_are_dropped_without_spinning():
    """Due expiry rows whose call cannot be expired (a damaged store: `agentd check` reports them): one whose
    tool call is gone, one whose call was settled already. Each row is dropped with a log line; real deadlines
    still fire. Before, the first was retried every second for ever and the second spun agentd at 100% CPU
    (cancel found no deadline on the settled call, removed nothing, and the timer re-armed to the passed row)."""
    with Agentd(start=False) as a:
        quick = harness.scaled(2.0)
        a.write_config(f"[tool.approve]\nexecutor = human\nprompt = Approve?\nexpires = {int(quick * 1000)}ms\n")
        a.start()
        c = a.create(conversation="x", settings={"model": "echo", "tools": ["approve"]})
        a.send(c, '/tool approve {}')
        wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c})["tool_calls"], 10, "x's pending call")
        y = a.create(conversation="y", settings={"model": "echo", "tools": ["approve"]})
        a.send(y, '/tool approve {}')
        done = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": y})["tool_calls"], 10, "y's call")
        a.ok({"op": "resolve", "tool_call_id": done[0]["id"]})
        a.stop()
        # Rows due a second ago, written with LMDB's own tool: key deadline (8 bytes, big-endian) and tool call
        # id, value the conversation id (msgpack).
        due = int(time.time() * 1000) - 1000
        rows = (" " + (due.to_bytes(8, "big") + b"tc-orphan").hex() + "\n a178\n" +
                " " + (due.to_bytes(8, "big") + done[0]["id"].encode()).hex() + "\n a179\n")
        dump = "VERSION=3\nformat=bytevalue\ndatabase=expiries\ntype=btree\nHEADER=END\n" + rows + "DATA=END\n"
        subprocess.run(["mdb_load", "-s", "expiries", a.data_dir], input=dump, text=True, check=True)
        rc = harness.run_agentd("check", "--data", a.data_dir, capture_output=True, text=True)
        assert rc.returncode == 1 and "tc-orphan" in rc.stdout and done[0]["id"] in rc.stdout, rc.stdout
        a.start()
        res = wait_for(lambda: [e for e in a.events(c) if e["type"] == "resolution"], quick + 10, "x's expiry")
        assert res[0]["content"]["status"] == "expired", res
        for id in ("tc-orphan", done[0]["id"]):
            line = f"tool call {id}: dropped a deadline row for a call that is settled or gone"
            assert a.log().count(line) == 1, a.log_tail()
        cpu0, t0 = cpu_seconds(a.pid), time.monotonic()
        time.sleep(harness.scaled(1))
        cpu = cpu_seconds(a.pid) - cpu0
        assert cpu < 0.25 * (time.monotonic() - t0), f"agentd used {cpu:.2f} s of CPU while idle"
        assert [e["type"] for e in a.events(y)][-2:] == ["resolution", "assistant_msg"]  # nothing more for y
        a.stop()
        rc = harness.run_agentd("check", "--data", a.data_dir, capture_output=True, text=True)
        assert rc.returncode == 0, rc.stdout


BIG_MODEL = """
import json, sys
json.load(sys.stdin)
print(json.dumps({"text": "z" * 2500000}))
"""


@harness.lmdb_only("LMDB's map size in workers")
def test_workers_keep_to_max_map_size():
    """Workers open the store with agentd's map_size and max_map_size: a turn whose answer does not fit fails
    with store full instead of growing the map past the limit (before, workers opened with the store's defaults
    and grew a 2 MiB store to 256 MiB to hold a 2.5 MB answer). The worker exits with the status that says so,
    and agentd records the error at once instead of restarting it: a re-run would call the model again, and
    its answer would not fit either."""
    with Agentd(start=False) as a:
        model = a.script("big.py", BIG_MODEL)
        a.write_config(f"[agentd]\nmap_size = 2m\nmax_map_size = 2m\n[model.big]\ncommand = python3 {model}\n")
        a.start()
        c = a.create(model="big")
        assert a.send(c, "hi") == 1
        err = wait_for(lambda: [e for e in a.events(c) if e["type"] == "error"], 30, "the error event")
        assert err[0]["content"]["attempts"] == 1 and "store is full" in err[0]["content"]["message"], err
        assert [e["type"] for e in a.events(c)] == ["user_msg", "error"], a.events(c)
        assert a.log().count("append: store full") == 1, a.log_tail()  # one model call, no restart
        assert "restarting in" not in a.log(), a.log_tail()
        assert a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle"
        store = a.ok({"op": "status"})["store"]
        assert store["map_size"] == 2 << 20, store
        assert os.path.getsize(os.path.join(a.data_dir, "data.mdb")) <= 2 << 20
        assert a.ok({"op": "ping"})
        rc = harness.run_agentd("check", "--data", a.data_dir, capture_output=True, text=True)
        assert rc.returncode == 0, rc.stdout


@harness.lmdb_only('a full disk under the LMDB data directory')
def test_disk_full_is_store_full():
    with SmallDisk() as mnt:
        if not mnt:
            print("SKIP test_disk_full_is_store_full: cannot mount a small tmpfs (needs root)")
            return
        data = os.path.join(mnt, "data")
        with Agentd(data_dir=data, start=False) as a:
            model = a.script("short.py", SHORT_MODEL)
            a.write_config(f"[model.short]\ncommand = python3 {model}\n")
            a.start()
            c = a.create(model="short")
            acked, _ = fill_until_full(a, c, 100000)
            evs = a.events(c)
            got = {e.get("event_id") for e in evs}
            assert all(eid in got for eid, _ in acked)
            assert a.ok({"op": "ping"})


class SmallDisk:
    """A 3 MiB tmpfs, unmounted on exit; None when it cannot be mounted (not root): the test skips."""
    def __enter__(self):
        self.mnt = tempfile.mkdtemp(prefix="agentd-small-disk-")
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", self.mnt], capture_output=True).returncode:
            os.rmdir(self.mnt)
            self.mnt = None
        return self.mnt

    def __exit__(self, *exc):
        if self.mnt:
            subprocess.run(["umount", "-l", self.mnt])
            os.rmdir(self.mnt)
        return False


def fill_disk(a, conv):
    for size, tag in ((100000, "f"), (1000, "g")):
        for i in range(2000):
            r = a.request({"op": "send", "conversation": conv, "content": "x" * size, "event_id": f"{tag}{i}"})
            if not r["ok"]:
                assert r["error"] == "store_full", r
                break


@harness.lmdb_only('a full disk under the LMDB data directory')
def test_a_turn_that_meets_a_full_disk_is_not_rerun():
    # The store full on a full disk (not at max_map_size) was taken for a map that could still grow: the
    # worker was restarted, and every restart called the model again for the same turn (5 calls, then the
    # crash limit). With under 4 MiB free the full store is the disk's: the error is recorded at once.
    with SmallDisk() as mnt:
        if not mnt:
            print("SKIP test_a_turn_that_meets_a_full_disk_is_not_rerun: cannot mount a small tmpfs (needs root)")
            return
        with Agentd(data_dir=os.path.join(mnt, "data"), start=False) as a:
            rec, gate = os.path.join(a.dir, "model.rec"), os.path.join(a.dir, "gate")
            m = a.script("m.py", f"""
                import json, os, sys, time
                req = json.load(sys.stdin)
                while not os.path.exists({gate!r}):
                    time.sleep(0.02)
                open({rec!r}, "a").write(req["conversation"] + " turn " + str(req["turn"]) + "\\n")
                print(json.dumps({{"text": "y" * 200000}}))
                """)
            a.write_config(f"[model.m]\ncommand = python3 {m}\n")
            a.start()
            c = a.create(model="m", conversation="c")
            assert a.send(c, "hi") == 1  # its model waits for the gate
            fill_disk(a, a.create(conversation="filler"))
            open(gate, "w").close()
            # (the error event itself may not fit either: then agentd logs that it cannot record it)
            wait_for(lambda: "c: commit turn: store full" in a.log(), 20, "the turn's commit to fail")
            time.sleep(harness.scaled(2))  # a restart would call the model again within this
            assert open(rec).read().splitlines() == ["c turn 1"], open(rec).read()
            assert "restarting in" not in a.log(), a.log_tail()
            assert a.ok({"op": "ping"})
            a.stop(expect=None)


@harness.lmdb_only('a full disk under the LMDB data directory')
def test_agentd_starts_on_a_full_disk():
    # The copy of the configuration for workers (agentd.ini.running) could not be written, and agentd refused
    # to start: on a full disk nothing could be read either. Now the workers read the file itself (warned).
    with SmallDisk() as mnt:
        if not mnt:
            print("SKIP test_agentd_starts_on_a_full_disk: cannot mount a small tmpfs (needs root)")
            return
        with Agentd(data_dir=os.path.join(mnt, "data"), start=False) as a:
            a.write_config("[agentd]\nidle_timeout = 300s\n")
            a.start()
            c = a.create(conversation="c")
            assert a.send(c, "kept") == 1
            wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo")
            fill_disk(a, a.create(conversation="filler"))
            a.kill(signal.SIGKILL)
            # Not one block left, and no pid file whose block a truncation frees: the restart cannot write its
            # pid. libbsd's pidfile_write then dropped the data directory's lock (and leaked its handle): a
            # second agentd could run on the same store.
            os.unlink(os.path.join(a.data_dir, "agentd.pid"))
            fd = os.open(os.path.join(mnt, "rest"), os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
            finally:
                os.close(fd)
            a.start()
            assert "workers will read" in a.log() and "itself" in a.log(), a.log_tail()
            assert "cannot write agentd's pid" in a.log() and "the lock holds" in a.log(), a.log_tail()
            assert a.events(c)[0]["content"] == {"text": "kept"}
            b = Agentd(data_dir=a.data_dir, start=False)
            try:
                assert b.expect_exit() == 1
                assert "another agentd is already running on" in b.log(), b.log()
            finally:
                b.close()
            assert a.ok({"op": "get", "conversation": c})
            a.stop(expect=None)


def test_spawns_short_of_descriptors_back_off_and_are_not_crashes():
    # At its open-files limit agentd forked workers whose child could not place its descriptors: they exited
    # 127 unexplained, were counted as crashes, and after five the conversation got a permanent "worker
    # crashed" error although no worker had run. Now the child reports the errno as an exec failure does:
    # logged, backed off, retried, and every conversation is answered once descriptors are free.
    if harness.VALGRIND:
        return  # valgrind needs descriptors of its own under this limit; the plain run covers agentd
    with Agentd(start=False) as a:
        a.launcher = [a.script("limited30.py", """
            import os, resource, sys
            resource.setrlimit(resource.RLIMIT_NOFILE, (30, 30))
            os.execvp(sys.argv[1], sys.argv[1:])
            """)]
        a.write_config("[agentd]\nidle_timeout = 2s\n")
        a.start()
        convs = [a.create(conversation=f"c{i}") for i in range(20)]
        for c in convs:
            assert a.send(c, "hi") == 1
        def answered():
            return all(len(a.events(c)) >= 2 for c in convs)
        wait_for(answered, 60, "every conversation to be answered")
        for c in convs:
            assert [(e["type"], e["content"].get("text")) for e in a.events(c)] == \
                [("user_msg", "hi"), ("assistant_msg", "echo: hi")], (c, a.events(c))
        assert "crashed" not in a.log(), a.log_tail()


def test_descriptor_limit_refuses_clients_and_goes_on():
    with Agentd(start=False) as a:
        # A launcher, not a replacement binary: under AGENTD_VALGRIND it runs valgrind with the limit
        # (which then keeps some of the 48 descriptors for itself and gives agentd the rest). agentd holds
        # about 21 with no client (its store, socket, loop, five timerfds): a worker's start needs a few
        # more once the clients are gone, which valgrind's share must leave room for.
        a.launcher = [a.script("limited.py", """
            import os, resource, sys
            resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
            os.execvp(sys.argv[1], sys.argv[1:])
            """)]
        a.start()
        socks = []
        for _ in range(60):
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(a.socket)
            except OSError:
                s.close()
                break
            socks.append(s)
        # Past the limit, connections are accepted and closed at once (not left hanging).
        closed = 0
        for s in socks:
            s.settimeout(0.2)
            try:
                s.sendall(b'{"op":"ping"}\n')
                if s.recv(100) == b"":
                    closed += 1
            except socket.timeout:
                pass
            except OSError:  # reset: closed by agentd before it read our request
                closed += 1
        assert closed > 0, "no connection was refused at the descriptor limit"
        wait_for(lambda: "out of file descriptors" in a.log(), 5, "the log line")
        for s in socks:
            s.close()
        # The loop went on: new clients are served again.
        # (agentd notices the closed sockets on its next iteration: until then a new client may still be
        # refused, which the wait absorbs.)
        wait_for(lambda: a.request({"op": "ping"})["ok"], 10, "service after the limit",
                 ignore=(AssertionError, OSError))
        c = a.create()
        a.send(c, "still here")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")


def test_worker_limit_queues():
    with Agentd(start=False, extra_args=("--max-workers", "2")) as a:
        gate = a.gated_model()
        a.start()
        convs = [a.create(model="gated") for _ in range(4)]
        for c in convs:
            a.send(c, "hi")
        def states():
            return sorted(w["state"] for w in a.ok({"op": "status"})["workers"])
        got = wait_for(lambda: (s := states()).count("queued") == 2 and s, 10, "two queued conversations")
        assert sum(1 for w in a.ok({"op": "status"})["workers"] if w["pid"]) == 2, got
        open(gate, "w").close()
        for c in convs:
            wait_for(lambda c=c: len(a.events(c)) >= 2, 20, f"{c} answered")


def test_a_worker_with_nothing_to_do_gives_its_slot_to_a_queued_conversation():
    # Before, a conversation queued at max_workers waited for an idle worker's idle_timeout (300 s by
    # default), or for as long as a person took to answer one that was awaiting input.
    with Agentd(start=False, extra_args=("--max-workers", "1")) as a:
        a.write_config("[tool.ask]\nexecutor = human\nexpires = 0\n")
        a.start()
        workers = lambda: [(w["conversation"], w["state"]) for w in a.ok({"op": "status"})["workers"] if w["pid"]]
        idle = a.create()
        a.send(idle, "one")
        wait_for(lambda: workers() == [(idle, "idle")], 10, "an idle worker")
        asking = a.create(settings={"model": "echo", "tools": ["ask"]})
        a.send(asking, "/tool ask")  # queued; the idle worker gives its slot
        wait_for(lambda: workers() == [(asking, "awaiting_input")], 10, "the queued conversation started")
        late = a.create()
        a.send(late, "two")  # queued; the awaiting worker gives its slot
        wait_for(lambda: len(a.events(late)) == 2, 10, "the second queued conversation answered")
        assert a.events(idle)[-1]["type"] == "assistant_msg" and len(a.events(idle)) == 2
        call = a.ok({"op": "tool_calls", "conversation": asking})["tool_calls"][0]
        a.ok({"op": "resolve", "tool_call_id": call["id"], "result": "fine"})  # revives it, in turn
        wait_for(lambda: a.events(asking)[-1]["type"] == "assistant_msg", 10, "the resolved conversation answered")
        assert "crash" not in a.log()


def test_deleting_a_queued_or_live_conversation_leaves_nothing_behind():
    # A queued conversation deleted stayed on the queue, then sat in backoff (10 s): created again, it was
    # answered only after that. Deleted, created and sent to in one iteration while its old worker lived,
    # its message was never answered (the reaped worker was not replaced).
    with Agentd(start=False, extra_args=("--max-workers", "1")) as a:
        gate = a.gated_model()
        a.start()
        busy = a.create(model="gated")
        a.send(busy, "hold")
        wait_for(lambda: a.worker_pid(busy), 10, "the busy worker")
        a.create(conversation="qb")
        a.send("qb", "queued")
        states = lambda: {w["conversation"]: w["state"] for w in a.ok({"op": "status"})["workers"]}
        wait_for(lambda: states().get("qb") == "queued", 10, "qb queued")
        a.ok({"op": "delete", "conversation": "qb"})
        assert "qb" not in states(), states()
        open(gate, "w").close()
        wait_for(lambda: len(a.events(busy)) == 2, 10, "the busy conversation answered")
        a.create(conversation="qb")
        t0 = time.monotonic()
        a.send("qb", "again")
        wait_for(lambda: len(a.events("qb")) == 2, 10, "the re-created qb answered")
        assert time.monotonic() - t0 < harness.scaled(3), time.monotonic() - t0
        for i in range(3):  # qb now has a live worker
            assert a.worker_pid("qb")
            with a.conn() as k:
                reqs = [{"op": "delete", "conversation": "qb"},
                        {"op": "create", "conversation": "qb", "settings": {"model": "echo"}},
                        {"op": "send", "conversation": "qb", "content": f"round {i}"}]
                k.raw(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
                assert all(k.recv()["ok"] for _ in reqs)
            wait_for(lambda: len(a.events("qb")) == 2, 10, f"round {i} answered")
            assert a.events("qb")[1]["content"]["text"] == f"echo: round {i}", a.events("qb")
        assert "crash" not in a.log() and "backoff" not in a.log()


def test_a_send_and_a_delete_together_start_no_worker():
    # The send took a lease for a worker started during its commit's flush; the delete in the same commit
    # left it on the list, so a worker was forked for a conversation already gone: it logged "conversation no
    # longer exists" and agentd "worker exited with status 3", two warnings for nothing.
    with Agentd() as a:
        def spawns():
            m = a.ok({"op": "metrics"})["text"]
            return int([l for l in m.splitlines() if l.startswith("agentd_worker_spawns_total")][0].split()[1])
        for i in range(3):
            c = a.create()
            before, kids = spawns(), a.children()
            with a.conn() as k:
                k.raw(b"".join(json.dumps(r).encode() + b"\n" for r in
                               ({"op": "send", "conversation": c, "content": "x"}, {"op": "delete", "conversation": c})))
                assert k.recv()["ok"] and k.recv()["ok"]
            assert spawns() == before, (before, spawns())
            assert a.children() == kids, (kids, a.children())
            # Created again and sent to in one commit with the delete: that send is answered.
            a.create(conversation=c)
            with a.conn() as k:
                reqs = ({"op": "send", "conversation": c, "content": "x"}, {"op": "delete", "conversation": c},
                        {"op": "create", "conversation": c, "settings": {"model": "echo"}},
                        {"op": "send", "conversation": c, "content": "again"})
                k.raw(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
                assert all(k.recv()["ok"] for _ in reqs)
            wait_for(lambda: len(a.events(c)) == 2, 10, "the re-created conversation answered")
        assert " warn: " not in a.log() and " error: " not in a.log(), a.log_tail()


def test_model_writing_gigabytes_is_capped():
    with Agentd(start=False) as a:
        model = a.script("flood.py", """
            import json, sys
            json.load(sys.stdin)
            chunk = '{"delta":"' + "y" * 65000 + '"}\\n'
            try:
                for _ in range(32768):  # 2 GiB
                    sys.stdout.write(chunk)
            except BrokenPipeError:
                pass
            """)
        a.write_config(f"[agentd]\nmodel_output_cap = 1m\n[model.flood]\ncommand = python3 {model}\nretries = 0\n")
        a.start()
        c = a.create(model="flood")
        a.send(c, "go")
        err = wait_for(lambda: a.events(c, type="error"), 60, "the error event")
        assert "more than" in err[0]["content"]["message"], err
        # agentd itself stayed small.
        rss_kb = int([l for l in open(f"/proc/{a.pid}/status") if l.startswith("VmRSS")][0].split()[1])
        assert rss_kb < 200 * 1024, rss_kb


def test_killed_worker_takes_its_tool_and_grandchildren():
    """A tool that forked a background process: kill -9 the worker and the whole tool group goes too (the
    pdeath signal alone reaches only the tool itself)."""
    with Agentd(start=False) as a:
        pids = os.path.join(a.dir, "pids")
        tool = a.script("forker.py", f"""
            import os, subprocess, sys, time
            child = subprocess.Popen(["sleep", "1000"])
            with open({pids!r}, "a") as f:
                f.write(f"{{os.getpid()}} {{child.pid}}\\n")
            time.sleep(1000)
            """)
        a.write_config(f"[tool.slow]\nexecutor = server\ncommand = python3 {tool}\n")
        a.start()
        c = a.create(settings={"model": "echo", "tools": ["slow"]})
        a.send(c, "/tool slow")
        line = wait_for(lambda: os.path.exists(pids) and open(pids).read().split(), 10, "the tool running")
        tool_pid, grandchild = int(line[0]), int(line[1])
        worker = a.worker_pid(c)
        os.kill(worker, 9)
        wait_for(lambda: not harness.pid_alive(tool_pid) and not harness.pid_alive(grandchild), 10,
                 "the tool and its child killed with the worker")


def test_worker_exec_failure_is_reported_and_backs_off():
    """agentd-worker missing: the exec failure comes back through the close-on-exec pipe as a clear log line,
    the conversation waits out a backoff instead of spinning, and agentd keeps serving."""
    with Agentd(extra_args=("--worker", "/nonexistent/agentd-worker")) as a:
        c = a.create()
        assert a.send(c, "hi") == 1
        wait_for(lambda: "cannot run /nonexistent/agentd-worker: No such file or directory" in a.log(), 10,
                 "the exec failure in the log")
        w = wait_for(lambda: [x for x in a.ok({"op": "status"})["workers"] if x["conversation"] == c], 10,
                     "the conversation in status")
        assert w[0]["state"] == "backoff" and w[0]["pid"] is None, w
        assert a.log().count("cannot run") == 1, "the spawn was retried without a backoff"
        assert a.events(c)[0]["type"] == "user_msg"  # the acknowledged send is kept
        assert a.zombies() == []


# The real agentd-worker for every conversation, except that conversation "lost" reaches the store through LINK
# (its --data rewritten): a symlink to the data directory the test can take away from that worker alone.
STORE_PATH_WRAPPER = """
import os, sys
argv = sys.argv[1:]
if argv[argv.index("--conversation") + 1] == "lost":
    argv[argv.index("--data") + 1] = %(link)r
os.execv(%(worker)r, [%(worker)r] + argv)
"""


@harness.lmdb_only("takes one worker's path to the LMDB directory away")
def test_worker_that_cannot_reopen_the_store_exits_and_is_revived():
    """A worker waiting for its next event lets go of the store (agent/main.c, STORE_LINGER_MS) and opens it
    again when the event comes. When that fails, the worker exits with status 5 (EXIT_STORE) saying why, and agentd
    restarts it after a backoff, gives up after restart_limit crashes, serves everyone else meanwhile and loses
    nothing it acknowledged; once the store can be opened again, the next event revives the conversation. The
    failure is real: the worker's path to the store is taken away while it waits (as root, permissions would not
    stop it), and agentd, which keeps its environment open, and other workers use another path."""
    with Agentd(start=False) as a:
        link = os.path.join(a.dir, "lost-data")
        os.symlink(a.data_dir, link)
        wrapper = a.script("path_worker.py", STORE_PATH_WRAPPER % {"link": link, "worker": a.worker_program()})
        a.extra_args += ["--worker", wrapper]
        a.write_config("[agentd]\nrestart_limit = 2\n")
        a.start()
        c = a.create(conversation="lost")
        a.send(c, "hi")
        wait_for(lambda: len(a.events(c)) == 2, 10, "the first answer")
        pid = a.worker_pid(c)
        wait_for(lambda: not [t for t in harness.open_fds(pid).values() if t.endswith(("/data.mdb", "/lock.mdb"))],
                 10, "the waiting worker to let go of the store")
        os.unlink(link)
        assert a.send(c, "again") == 3  # committed and acknowledged by agentd
        wait_for(lambda: f"{c}: worker {pid} exited with status 5" in a.log(), 10, "the worker's exit")
        assert f"{c}: cannot open the store in {link} again: No such file or directory" in a.log(), a.log_tail()
        # Restarted after a backoff; the new worker cannot open the store either, and at restart_limit agentd
        # records why in the log and leaves the conversation until its next event.
        err = wait_for(lambda: a.events(c, type="error"), 20, "agentd giving up on the conversation")
        assert f"{c}: restarting in 100 ms (crash 1 of 2 allowed in 60 s)" in a.log(), a.log_tail()
        assert "worker crashed 2 times" in err[0]["content"]["message"], err
        exits = re.findall(rf"{c}: worker (\d+) exited with status (\d+)", a.log())
        assert len(exits) == 2 and exits[0] == (str(pid), "5") and exits[1][0] != str(pid) and exits[1][1] == "5", exits
        assert f"{c}: cannot open the store in {link}: No such file or directory" in a.log(), a.log_tail()
        assert not [w for w in a.ok({"op": "status"})["workers"] if w["conversation"] == c]
        # agentd went on serving, and every event it acknowledged is there.
        other = a.create()
        a.send(other, "still here")
        wait_for(lambda: len(a.events(other)) == 2, 10, "another conversation's answer")
        assert a.events(other)[1]["content"]["text"] == "echo: still here"
        assert [(e["seq"], e["type"]) for e in a.events(c)] == [
            (1, "user_msg"), (2, "assistant_msg"), (3, "user_msg"), (4, "error")], a.events(c)
        assert [e["content"]["text"] for e in a.events(c, type="user_msg")] == ["hi", "again"]
        # The store is reachable again: the next event revives the conversation, and its answer covers the
        # message acknowledged while it was down too.
        os.symlink(a.data_dir, link)
        assert a.send(c, "back") == 5
        wait_for(lambda: len(a.events(c)) == 6, 15, "the revived conversation's answer")
        answer = a.events(c)[5]
        assert answer["type"] == "assistant_msg" and answer["content"]["text"] == "echo: again\necho: back", answer
        wait_for(lambda: not a.zombies(), 5, "no zombie workers")


def real_worker():
    """The agentd-worker program a wrapper execs: on PostgreSQL its dynamic twin (the static one has no libpq)."""
    w = os.path.join(os.path.dirname(harness.AGENTD_BIN), "agentd-worker")
    return w + "-dynamic" if harness.PG and os.path.exists(w + "-dynamic") else w


# A worker for conversation "hog" that takes the write gate and never writes (a hung worker); for "twice", one
# that asks for it twice (a protocol error); every other conversation gets the real agentd-worker.
GATE_WRAPPER = """
import os, socket, struct, sys, time
argv = sys.argv[1:]
conv, fd = argv[argv.index("--conversation") + 1], int(argv[argv.index("--ipc-fd") + 1])
if conv not in ("hog", "twice", "shut"):
    os.execv(%(worker)r, [%(worker)r] + argv)
s = socket.socket(fileno=fd)
s.send(b"\\x82\\xa1t\\xa5ready\\xa3num\\xd2" + struct.pack(">i", os.getpid()))
if conv == "shut":  # shuts its socket for reading, then asks: the grant cannot reach it
    s.shutdown(socket.SHUT_RD)
    s.send(b"\\x81\\xa1t\\xa5write")
    while True:
        time.sleep(60)
s.send(b"\\x81\\xa1t\\xa5write")
if conv == "twice":
    s.send(b"\\x81\\xa1t\\xa5write")
while b"\\xa5grant" not in s.recv(65536):
    pass
# The grant's time, for tests that need it: made once the grant is read, so never before it.
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "granted-" + conv), "w").close()
while True:  # holds the grant until told to stop, or its supervisor is gone
    m = s.recv(65536)
    if not m or b"\\xa1t\\xa4stop" in m:
        break
"""


def test_a_worker_run_by_hand_says_it_is_agentds_to_start():
    # Given a descriptor that is no socket (stdout, or one not open), it exited 0 without a word.
    worker = real_worker()
    with Agentd() as a:
        for fd in ("1", "99"):
            p = subprocess.run([worker, "--data", a.data_dir, "--conversation", "c", "--lease", "1", "--ipc-fd", fd],
                               capture_output=True, text=True, timeout=30)
            assert p.returncode == 2 and f"--ipc-fd {fd} is not a socket" in p.stderr, (fd, p)
        assert a.ok({"op": "ping"})


def test_hung_worker_holding_the_write_gate_is_passed_over():
    """The supervisor grants workers their writes one at a time (the write gate, ipc/ipc.h). A worker that takes
    the grant and never answers holds up neither agentd's own writes (a send waits for it at most about a second)
    nor other workers' (its grant is taken back); a worker that asks twice is killed."""
    with Agentd(start=False) as a:
        worker = real_worker()
        wrapper = a.script("gate_worker.py", GATE_WRAPPER % {"worker": worker})
        a.extra_args += ["--worker", wrapper]
        a.start()
        hog = a.create(conversation="hog")
        a.send(hog, "hi")
        wait_for(lambda: "agentd_write_gate_grants_total 1\n" in a.ok({"op": "metrics"})["text"], 10,
                 "the hung worker granted the gate")
        c = a.create()
        assert a.send(c, "hello") == 1  # committed despite the grant the hog holds
        wait_for(lambda: [e["type"] for e in a.events(c)] == ["user_msg", "assistant_msg"], 15,
                 "the other conversation's answer, written after the hog's grant was taken back")
        assert a.events(c)[1]["content"]["text"] == "echo: hello", a.events(c)
        assert "hog: worker" in a.log() and "has held the write gate for" in a.log(), a.log_tail()
        text = a.ok({"op": "metrics"})["text"]
        assert "agentd_write_gate_revoked_total 1\n" in text, text
        assert [e["type"] for e in a.events(hog)] == ["user_msg"]  # the hog wrote nothing
        a.send(a.create(conversation="twice"), "hi")
        wait_for(lambda: "twice: worker" in a.log() and "asked for the write gate twice: killing it" in a.log(),
                 10, "the protocol error in the log")
        assert [e["type"] for e in a.events(c)] == ["user_msg", "assistant_msg"]
        # A live worker whose socket is shut for reading would wait for its grant forever: killed too.
        shut = a.create(conversation="shut")
        a.send(shut, "hi")
        wait_for(lambda: re.search(r"shut: cannot grant worker \d+ its write: Broken pipe: killing it", a.log()), 10,
                 "the grant that cannot be sent")
        wait_for(lambda: re.search(r"shut: worker \d+ killed by signal 9", a.log()), 10, "the worker killed")
        wait_for(lambda: not a.zombies(), 5, "no zombie")
        assert a.send(c, "again") == 3
        wait_for(lambda: len(a.events(c)) == 4, 15, "the other conversation's next answer")


def test_writes_wait_for_the_gate_without_stopping_the_loop():
    """While a worker holds the write gate, agentd does not block on it: its writes wait for the next group commit
    (answered in order, a pipelined read seeing exactly the writes before it), and everything else is served."""
    with Agentd(start=False) as a:
        worker = real_worker()
        a.extra_args += ["--worker", a.script("gate_worker.py", GATE_WRAPPER % {"worker": worker})]
        a.start()
        c = a.create(conversation="p")
        a.send(a.create(conversation="hog"), "hi")
        wait_for(lambda: "agentd_write_gate_grants_total 1\n" in a.ok({"op": "metrics"})["text"], 10,
                 "the hung worker granted the gate")
        with a.conn() as k, a.conn() as other:
            k.raw(b"".join(json.dumps(r).encode() + b"\n" for r in [
                {"op": "send", "conversation": c, "content": "one", "id": 1},
                {"op": "events", "conversation": c, "limit": 5, "id": 2},
                {"op": "send", "conversation": c, "content": "two", "id": 3},
                {"op": "events", "conversation": c, "limit": 5, "id": 4}]))
            assert other.request({"op": "ping"})["ok"]  # served while the sends wait
            # The hog's grant is taken back a second after it was given: until then the sends are held. Under
            # valgrind or ASan (AGENTD_TEST_SLOW > 1) that second may be gone already: ordering is checked only.
            assert held_after_ping(k) or harness.scaled(1) > 1, "the sends were not held for the gate"
            r = [k.recv(20) for _ in range(4)]
        assert [x["id"] for x in r] == [1, 2, 3, 4] and all(x["ok"] for x in r), r
        assert r[0]["seq"] == 1 and r[2]["seq"] == 2, r
        assert [e["content"]["text"] for e in r[1]["events"] if e["type"] == "user_msg"] == ["one"], r[1]
        assert [e["content"]["text"] for e in r[3]["events"] if e["type"] == "user_msg"] == ["one", "two"], r[3]
        assert "has held the write gate for" in a.log(), a.log_tail()


def test_expiries_due_while_a_worker_holds_the_gate_fire_together():
    """A fired expiry waits for the worker holding the write gate (a second at most, above). The deadlines due are
    read after that wait, so every one that passed meanwhile fires in the same transaction, not each in a commit
    of its own behind the next worker's (agentd_expiry_commits_total counts the transactions)."""
    with Agentd(start=False) as a:
        worker = real_worker()
        a.extra_args += ["--worker", a.script("gate_worker.py", GATE_WRAPPER % {"worker": worker})]
        expires = harness.scaled(1.5)
        a.write_config(f"[tool.approve]\nexecutor = human\nprompt = Approve?\nexpires = {int(expires * 1000)}ms\n")
        a.start()
        convs, deadlines = [], []
        for name in ("x", "y"):
            c = a.create(conversation=name, settings={"model": "echo", "tools": ["approve"]})
            a.send(c, '/tool approve {"what": "deploy"}')
            calls = wait_for(lambda: [tc for tc in a.ok({"op": "tool_calls", "conversation": c})["tool_calls"]
                                      if tc["deadline"]], 10, f"{c}'s pending call")
            convs.append(c)
            deadlines.append(calls[0]["deadline"])
            time.sleep(0.2)
        # The hog takes the gate before the first deadline; its grant is taken back a second later.
        wait_for(lambda: time.time() * 1000 >= deadlines[0] - 500, expires + 5, "half a second before the deadline")
        def grants():
            return int(re.search(r"\nagentd_write_gate_grants_total (\d+)", a.ok({"op": "metrics"})["text"])[1])
        before = grants()  # x's and y's turns; they now wait for a person and write nothing
        a.send(a.create(conversation="hog"), "hi")
        wait_for(lambda: grants() > before, 10, "the hung worker granted the gate")
        # When the hog was granted the gate, from the hog itself (its mark's time is never before the grant):
        # the counter above may have been moved by another worker's write, before the hog's grant.
        mark = os.path.join(a.dir, "scripts", "granted-hog")
        wait_for(lambda: os.path.exists(mark), 10, "the hog to say it holds the grant")
        granted = os.stat(mark).st_mtime * 1000
        for c in convs:
            wait_for(lambda: [e for e in a.events(c) if e["type"] == "resolution"], expires + 10, f"{c}'s expiry")
            res = [e for e in a.events(c) if e["type"] == "resolution"]
            assert len(res) == 1 and res[0]["content"]["status"] == "expired", res
        text = a.ok({"op": "metrics"})["text"]
        assert "agentd_expiries_fired_total 2\n" in text, text
        m = re.search(r"(\d\d):(\d\d):(\d\d)\.(\d{3})Z \S+ warn: hog: worker \d+ has held the write gate", a.log())
        assert m, a.log_tail()
        # Both deadlines fell inside the hog's grant unless this machine was too slow to set that up (valgrind,
        # ASan): then the expiries are only checked to have fired once each.
        h, mi, sec, ms = (int(g) for g in m.groups())
        day = deadlines[1] - deadlines[1] % 86400000
        revoked = day + ((h * 60 + mi) * 60 + sec) * 1000 + ms
        if granted < deadlines[0] and revoked > deadlines[1]:  # both due inside the grant: one transaction
            assert "agentd_expiry_commits_total 1\n" in text, text
        else:
            print(f"note: the grant ({granted:.0f}) or its revocation ({revoked}) missed the deadlines {deadlines}")
        for c in convs:  # each conversation answered its expiry once the gate was free
            wait_for(lambda: a.events(c)[-1]["type"] == "assistant_msg" and len(a.events(c)) >= 5, 15,
                     f"{c}'s turn after the expiry")


# A worker for conversation "deaf" (its first start; later ones are the real agentd-worker, as are every other
# conversation's) that never reads what agentd sends it. It has agentd queue compaction requests to it, one per
# connection, until agentd's socket buffer is full: agentd then answers that request at once (could not reach the
# worker) instead of queueing it, and its answer is written to NOTE. Only then does it ask for the write gate, and
# it stays alive, so agentd's grant cannot be sent (EAGAIN) to a worker that is not gone.
DEAF_WRAPPER = """
import fcntl, json, os, select, socket, struct, sys, termios, time
argv = sys.argv[1:]
conv, fd = argv[argv.index("--conversation") + 1], int(argv[argv.index("--ipc-fd") + 1])
if conv != "deaf" or os.path.exists(%(note)r + ".started"):
    os.execv(%(worker)r, [%(worker)r] + argv)
open(%(note)r + ".started", "w").close()
s = socket.socket(fileno=fd)
s.send(b"\\x82\\xa1t\\xa5ready\\xa3num\\xd2" + struct.pack(">i", os.getpid()))
def unread():  # bytes agentd has queued to us
    return struct.unpack("i", fcntl.ioctl(s, termios.FIONREAD, b"\\0\\0\\0\\0"))[0]
req = json.dumps({"op": "compact", "conversation": "deaf"}).encode() + b"\\n"
while True:
    before = unread()
    with socket.socket(socket.AF_UNIX) as c:
        c.connect(%(sock)r)
        c.sendall(req)
        while unread() == before and not select.select([c], [], [], 0.005)[0]:
            pass
        if unread() == before:  # not queued to us, and answered
            reply = c.recv(65536)
            break
with open(%(note)r + ".tmp", "wb") as f:
    f.write(reply)
os.rename(%(note)r + ".tmp", %(note)r)
s.send(b"\\x81\\xa1t\\xa5write")
while True:
    time.sleep(60)
"""


def test_worker_that_cannot_be_granted_its_write_is_killed():
    """When agentd cannot send a worker the grant it asked for (its socket is full: it does not read, yet it is
    alive), it says so and kills it (supervisor/gate.c, gate_pump); the worker is reaped, the gate is not left
    held, other conversations are served and written, and the conversation revives on its next event."""
    with Agentd(start=False) as a:
        note = os.path.join(a.dir, "deaf-note")
        a.extra_args += ["--worker", a.script("deaf_worker.py", DEAF_WRAPPER % {
            "note": note, "sock": a.socket, "worker": a.worker_program()})]
        a.start()
        c = a.create(conversation="deaf")
        with a.conn() as first:
            first.send({"op": "compact", "conversation": c})  # starts the worker; answered when it is gone
            pid = wait_for(lambda: a.worker_pid(c), 10, "the worker")
            wait_for(lambda: os.path.exists(note), 30, "the worker's socket buffer full")
            with open(note) as f:
                assert "could not reach the worker of deaf" in f.read()
            wait_for(lambda: f"{c}: worker {pid} killed by signal 9" in a.log(), 10, "the worker killed")
            assert f"{c}: cannot grant worker {pid} its write: Resource temporarily unavailable: killing it" in a.log(), \
                a.log_tail()
            assert harness.proc_stat(pid) is None  # reaped (agentd logs the exit after waitpid): no zombie
            reply = first.recv()
            assert not reply["ok"] and "exited before compacting" in reply["message"], reply
        assert a.worker_pid(c) is None and not a.zombies()
        # The gate was not left held: another conversation's worker writes its answer at once, and no grant was
        # taken back.
        other = a.create()
        a.send(other, "still here")
        wait_for(lambda: len(a.events(other)) == 2, 10, "another conversation's answer")
        assert a.events(other)[1]["content"]["text"] == "echo: still here"
        text = a.ok({"op": "metrics"})["text"]
        assert "agentd_write_gate_revoked_total 0\n" in text and "has held the write gate" not in a.log(), text
        # Its next event revives the conversation (with the real worker) and it answers.
        assert a.send(c, "hi") == 1
        wait_for(lambda: len(a.events(c)) == 2, 15, "the revived conversation's answer")
        assert a.events(c)[1]["content"]["text"] == "echo: hi"
        wait_for(lambda: not a.zombies(), 5, "no zombie workers")


def held_after_ping(conn):
    """Whether conn has no reply waiting yet."""
    conn.sock.setblocking(False)
    try:
        return not conn.sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    finally:
        conn.sock.setblocking(True)
        conn.sock.settimeout(harness.scaled(conn.timeout))


def test_events_without_limit_are_paged():
    """`events` without a limit answers at most 10,000 events, the oldest after `after`, so one client cannot
    make agentd build a whole long log as one reply; paging with after = the last seq gets the rest."""
    with Agentd(start=False) as a:
        model = a.script("short.py", SHORT_MODEL)
        a.write_config(f"[model.short]\ncommand = python3 {model}\n")
        a.start()
        c = a.create(model="short")
        conn = a.conn()
        n = 10050  # pipelined: group commit makes this quick; the model answers them in a few turns
        for i in range(n):
            conn.send({"op": "send", "conversation": c, "content": str(i)})
        for i in range(n):
            r = conn.recv()
            assert r["ok"], r
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 30, "idle")
        last = a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"]
        r = a.ok({"op": "events", "conversation": c})
        assert len(r["events"]) == 10000 and r["events"][-1]["seq"] == 10000 and r["last_seq"] == last, len(r["events"])
        rest = a.ok({"op": "events", "conversation": c, "after": 10000})["events"]
        assert [e["seq"] for e in rest] == list(range(10001, last + 1))
        tail = a.ok({"op": "events", "conversation": c, "limit": 5})["events"]
        assert [e["seq"] for e in tail] == list(range(last - 4, last + 1))


harness.main(globals())
