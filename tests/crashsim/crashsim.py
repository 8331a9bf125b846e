#!/usr/bin/env python3
"""crashsim.py: the power-loss simulator (docs/durability.md).

1. Workload: the real agentd and its workers run with tests/crashsim/shim.c preloaded, which appends every
   write to and every flush of DATA/data.mdb to a trace; the test's clients append an ACK record to the same
   trace after each reply they receive (a send's seq, a create's conversation, an event a long-poll
   delivered). The workload: four clients sending at once (group commits), a worker turn that calls a
   server tool (turn commits), a human tool whose 1 s expiry fires (expiry commits), agentd killed
   (SIGKILL) and started again in the middle (recovery commits), and at the end one client sending alone
   (groups the writer thread makes durable with its own flush).
2. Replay: crash points are drawn at random (seeded); for each, the disk image a power loss could leave is
   built: every write covered by a completed flush (one that began after the write returned) as written, and
   every other write begun before the crash point persisted whole, not at all, or torn (any subset of its
   512-byte sectors). Each image must open in LMDB (mdb_stat), pass `agentd check`, let agentd start (it
   is stopped again), and hold every acknowledged event with the seq and content it was acknowledged with.

Usage: crashsim.py [--must-fail | --sync none] [--images N]
  --images N    distinct crash images to check (default 500; AGENTD_CRASHSIM_IMAGES)
  --must-fail   run agentd with AGENTD_TEST_ACK_EARLY=1 (a group commit replies before its meta page is
                flushed) and succeed only if the simulator reports lost acknowledged writes (it stops once
                they showed and 50 distinct images were checked)
  --sync none   run agentd with sync = none (MDB_NOSYNC) and succeed only if the simulator reports damaged
                images (the same early stop): the image checks can fail too
Environment: AGENTD_CRASHSIM_SEED (the seed; printed either way), AGENTD_CRASHSIM_IMAGES,
AGENTD_CRASHSIM_SHIM (the shim's path; default build/tests/libcrashsim_shim.so), AGENTD_BUILD_DIR,
AGENTD_KEEP (keep the trace and the first failing image).
"""

import argparse
import bisect
import concurrent.futures
import fcntl
import hashlib
import json
import mmap
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "proc"))
import harness  # noqa: E402
from harness import Agentd, Client  # noqa: E402

REC = 160
SECTOR = 512
BUILD = os.path.dirname(harness.AGENTD_BIN)
SHIM = os.environ.get("AGENTD_CRASHSIM_SHIM") or os.path.join(BUILD, "tests", "libcrashsim_shim.so")

MODEL = r'''
import json, sys
req = json.load(sys.stdin)
msgs = req["messages"]
ctx = max([m["content"]["context_seq"] for m in msgs if m["type"] == "assistant_msg"], default=0)
users = [m["content"] for m in msgs if m["seq"] > ctx and m["type"] == "user_msg"]
last = users[-1] if users else None
out = {"text": "answer %d" % len(msgs), "usage": {"input_tokens": 1, "output_tokens": 1, "cost": 0}}
if isinstance(last, dict) and last.get("calls"):
    out["tool_calls"] = last["calls"]
print(json.dumps(out), flush=True)
'''

TOOL = r'''
import json, sys
a = json.load(sys.stdin)["args"]
print(json.dumps({"sum": a.get("a", 0) + a.get("b", 0)}))
'''


def content_hash(content):
    return hashlib.sha1(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


class Acks:
    """Appends ACK records to the trace: the same record size, the same flock as the shim."""

    def __init__(self, trace):
        self.path = trace
        self.lock = threading.Lock()
        self.fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.count = 0

    def _put(self, rest):
        with self.lock:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                line = f"{os.fstat(self.fd).st_size // REC} {rest}"
                assert len(line) < REC, line
                os.write(self.fd, (line.ljust(REC - 1) + "\n").encode())
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def ack(self, kind, conv, seq, etype, eid, content):
        self._put(f"ACK {os.getpid()} {kind} {conv} {seq} {etype} {eid or '-'} {content_hash(content)}")
        self.count += 1

    def ready(self):
        """agentd answered a ping: its store exists (crash points start here)."""
        self._put(f"READY {os.getpid()}")


# ----------------------------------------------------------------------------------------------------
# 1. The workload


def worker_program():
    dyn = os.path.join(BUILD, "agentd-worker-dynamic")
    return dyn if os.path.exists(dyn) else os.path.join(BUILD, "agentd-worker")


def config_text(a, sync="full"):
    model = a.script("model.py", MODEL)
    tool = a.script("tool.py", TOOL)
    return f"""
[agentd]
sync = {sync}
[model.m]
command = {model}
[tool.add]
executor = server
command = {tool}
description = Adds a and b.
[tool.hurry]
executor = human
prompt = Quick!
expires = 1s
"""


def run_workload(work, must_fail, sync="full"):
    trace = os.path.join(work, "trace")
    a = Agentd(start=False, extra_args=["--worker", worker_program()])
    env = dict(os.environ, LD_PRELOAD=SHIM, AGENTD_CRASHSIM_TRACE=trace, AGENTD_CRASHSIM_DIR=a.data_dir)
    env.pop("AGENTD_TEST_ACK_EARLY", None)
    if must_fail:
        env["AGENTD_TEST_ACK_EARLY"] = "1"
    a.env = env
    a.write_config(config_text(a, sync))
    acks = Acks(trace)
    a.start()
    acks.ready()

    def create(tools=()):
        r = a.ok({"op": "create", "settings": {"model": "m", "tools": list(tools)}})
        acks.ack("create", r["conversation"], 0, "-", None, None)
        return r["conversation"]

    def sender(k, conv, n, tag):
        with Client(a.socket, timeout=20) as c:
            for i in range(n):
                eid = f"{tag}-{k}-{i}"
                content = {"text": f"message {i} of client {k}", "pad": "x" * (i * 37 % 300)}
                r = c.request({"op": "send", "conversation": conv, "content": content, "event_id": eid})
                assert r.get("ok") is True, r
                acks.ack("send", conv, r["seq"], "user_msg", eid, content)

    def senders(convs, n, tag):
        ts = [threading.Thread(target=sender, args=(k, cv, n, tag)) for k, cv in enumerate(convs)]
        for t in ts:
            t.start()
        return ts

    def long_poll_until(conv, etype, timeout=20):
        """Long-poll conv, acknowledging every event delivered, until one of type etype arrives."""
        after = 0
        deadline = time.monotonic() + harness.scaled(timeout)
        with Client(a.socket, timeout=timeout + 5) as c:
            while time.monotonic() < deadline:
                r = c.request({"op": "events", "conversation": conv, "after": after, "wait_ms": 2000})
                assert r.get("ok") is True, r
                for e in r["events"]:
                    acks.ack("seen", conv, e["seq"], e["type"], e.get("event_id"), e["content"])
                    after = e["seq"]
                if any(e["type"] == etype for e in r["events"]):
                    return
        raise AssertionError(f"no {etype} in {conv} within {timeout}s")

    def frontier_flushes():
        """The durable frontier's flushes this agentd made, and those a worker's commit or flush spared."""
        text = a.ok({"op": "metrics"})["text"]
        return [int(re.search(rf"^agentd_durable_flushes{k}_total (\d+)$", text, re.M).group(1))
                for k in ("", "_spared")]

    convs = [create() for _ in range(4)]
    tool_conv = create(["add"])
    human_conv = create(["hurry"])
    ts = senders(convs, 12, "a")
    r = a.ok({"op": "send", "conversation": tool_conv, "content": {"calls": [{"name": "add", "args": {"a": 2, "b": 3}}]}})
    acks.ack("send", tool_conv, r["seq"], "user_msg", None, {"calls": [{"name": "add", "args": {"a": 2, "b": 3}}]})
    r = a.ok({"op": "send", "conversation": human_conv, "content": {"calls": [{"name": "hurry", "args": {}}]}})
    acks.ack("send", human_conv, r["seq"], "user_msg", None, {"calls": [{"name": "hurry", "args": {}}]})
    long_poll_until(tool_conv, "tool_result")
    long_poll_until(human_conv, "resolution")
    for t in ts:
        t.join()
    # A power cut is not a clean stop: agentd is killed, started again (start-up recovery commits), and
    # the clients go on.
    pids = [a.pid]
    flushes = frontier_flushes()
    a.kill(signal.SIGKILL)
    a.start()
    pids.append(a.pid)
    ts = senders(convs, 12, "b")
    r = a.ok({"op": "send", "conversation": tool_conv, "content": {"text": "after the restart"}})
    acks.ack("send", tool_conv, r["seq"], "user_msg", None, {"text": "after the restart"})
    for t in ts:
        t.join()
    long_poll_until(tool_conv, "assistant_msg")
    # One client alone, nobody else connected: the writer thread flushes its groups itself, right after
    # the commit (docs/durability.md), and those acknowledgements come from that flush.
    sender(0, convs[0], 8, "c")
    text = a.ok({"op": "metrics"})["text"]
    lone = int(re.search(r"^agentd_group_commits_flushed_total (\d+)$", text, re.M).group(1))
    flushes = [x + y for x, y in zip(flushes, frontier_flushes())]
    print(f"crashsim: the durable frontier made {flushes[0]} flushes ({lone} of them by the writer thread for a "
          f"lone client's group); {flushes[1]} more were spared, a worker's commit or flush covering them "
          f"(docs/durability.md)", flush=True)
    a.stop()
    cfg = os.path.join(work, "agentd.ini")
    shutil.copy(a.config_path, cfg)
    scripts = os.path.join(work, "scripts")
    shutil.copytree(os.path.join(a.dir, "scripts"), scripts)
    with open(cfg) as f:
        text = f.read().replace(os.path.join(a.dir, "scripts"), scripts)
    # agentd started on an image revives what was mid-turn: its model and tool calls only wait (the check
    # is that agentd starts, decides and stops cleanly, not what a model says), which saves a Python start
    # per revived worker per image.
    text = "\n".join("command = /bin/sleep 30" if ln.startswith("command = ") else ln for ln in text.split("\n"))
    with open(cfg, "w") as f:
        f.write(text)
    a.close()
    return trace, cfg, acks.count, pids


# ----------------------------------------------------------------------------------------------------
# 2. The trace


class Trace:
    def __init__(self, path):
        self.writes = {}  # begin seq -> dict
        self.flushes = []  # (begin, end, kind, scope)
        self.acks = []  # (seq, kind, conv, evseq, type, eid, hash)
        self.n = 0
        self.ready = None  # the first READY record: agentd's first start has made its store
        with open(path + ".data", "rb") as f:
            self.side = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""
        fb = {}
        with open(path, "rb") as f:
            raw = f.read()
        if len(raw) % REC:
            raise AssertionError("the trace ends in a partial record")
        for i in range(len(raw) // REC):
            rec = raw[i * REC:(i + 1) * REC].decode().split()
            seq, kind = int(rec[0]), rec[1]
            if seq != i:
                raise AssertionError(f"record {i} carries sequence number {seq}")
            if kind == "WB":
                fd, off, ln, at, h, ds = int(rec[3]), int(rec[4]), int(rec[5]), int(rec[6]), rec[7], rec[8] == "1"
                data = self.side[at:at + ln]
                if len(data) != ln:
                    raise AssertionError(f"write {seq}: its data is missing from the trace's data file")
                if seq % 16 == 0 and ln <= 16384 and fnv(data) != h:  # a sample: FNV in Python is slow
                    raise AssertionError(f"write {seq}: its data does not match its hash")
                self.writes[seq] = {"pid": int(rec[2]), "off": off, "len": ln, "data": data, "dsync": ds, "end": None, "ret": None}
            elif kind == "WE":
                w = self.writes[int(rec[3])]
                w["end"], w["ret"] = seq, int(rec[4])
            elif kind == "FB":
                fb[seq] = (rec[3], rec[4])
            elif kind == "FE":
                b = int(rec[3])
                if int(rec[4]) == 0 and fb[b][0] != "sync_file_range":
                    self.flushes.append((b, seq, fb[b][0], fb[b][1]))
            elif kind == "ACK":
                self.acks.append((seq, rec[3], rec[4], int(rec[5]), rec[6], rec[7], rec[8]))
            elif kind == "READY":
                self.ready = i if self.ready is None else self.ready
            elif kind == "XX":
                raise AssertionError(f"the trace holds something the simulator cannot model: {' '.join(rec)}")
        self.n = len(raw) // REC
        self.order = sorted(self.writes)
        self.flushes.sort(key=lambda f: f[1])

    def prepare(self):
        # For each write, the earliest end of a flush that began after the write returned. Flushes sorted by
        # begin let a pointer walk; a flush that began later can end earlier (several processes), so take the
        # minimum end over every flush that began after it: a suffix minimum over flushes sorted by begin.
        by_begin = sorted(self.flushes)
        suffix = [None] * (len(by_begin) + 1)
        for i in range(len(by_begin) - 1, -1, -1):
            e = by_begin[i][1]
            suffix[i] = e if suffix[i + 1] is None else min(e, suffix[i + 1])
        begins = [f[0] for f in by_begin]
        for s in self.order:
            w = self.writes[s]
            d = None
            if w["end"] is not None and w["ret"] is not None and w["ret"] >= 0:
                i = bisect.bisect_right(begins, w["end"])
                d = suffix[i]
                if w["dsync"]:
                    d = w["end"] if d is None else min(d, w["end"])
            w["durable"] = d


def fnv(data):
    h = 1469598103934665603
    # FNV-1a 64 over bytes; speed matters little (run once per write).
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def build_image(tr, c, rng):
    """The data.mdb a power loss at crash point c (before record c) could leave; returns (bytes, torn writes)."""
    img = bytearray()
    torn = 0
    for s in tr.order:
        if s >= c:
            break
        w = tr.writes[s]
        data = w["data"]
        if w["ret"] is not None and w["end"] is not None and w["end"] < c and w["ret"] >= 0:
            data = data[:w["ret"]]
        elif w["end"] is not None and w["end"] < c:
            continue  # failed: wrote nothing
        if w["durable"] is not None and w["durable"] < c:
            chunks = [(w["off"], data)]
        else:
            r = rng.random()
            if r < 0.35:
                chunks = [(w["off"], data)]
            elif r < 0.7:
                chunks = []
            else:
                torn += 1
                chunks = []
                off = w["off"]
                pos = 0
                while pos < len(data):
                    nxt = min(len(data), ((off + pos) // SECTOR + 1) * SECTOR - off)
                    if rng.random() < 0.5:
                        chunks.append((off + pos, data[pos:nxt]))
                    pos = nxt
        for off, d in chunks:
            end = off + len(d)
            if end > len(img):
                img.extend(bytes(end - len(img)))
            img[off:end] = d
    return bytes(img), torn


# ----------------------------------------------------------------------------------------------------
# 3. Checking an image


def run(cmd, **kw):
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kw)


def rpc(sock_path, obj, timeout=10):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall((json.dumps(obj) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
    return json.loads(buf)


def check_image(img_dir, cfg, convs):
    """Returns (problems, {(conv, seq): (type, eid, hash)}); a conversation that exists with no event maps
    (conv, 0) to None."""
    problems = []
    r = run(["mdb_stat", "-e", img_dir], timeout=30)
    if r.returncode:
        return [f"LMDB does not open it: mdb_stat: {r.stderr.strip() or r.stdout.strip()}"], {}
    r = run([harness.AGENTD_BIN, "check", "--data", img_dir], timeout=60)
    if r.returncode:
        return [f"agentd check (exit {r.returncode}): {(r.stdout + r.stderr).strip()[-600:]}"], {}
    sock = os.path.join(img_dir, "s.sock")
    log = open(os.path.join(img_dir, "agentd.log"), "wb")
    p = subprocess.Popen([harness.AGENTD_BIN, "--data", img_dir, "--socket", sock, "--config", cfg,
                          "--worker", worker_program()], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)
    events = {}
    try:
        deadline = time.monotonic() + harness.scaled(20)
        while True:
            if p.poll() is not None:
                log.flush()
                with open(os.path.join(img_dir, "agentd.log"), errors="replace") as f:
                    return [f"agentd does not start (exit {p.returncode}): {f.read()[-600:]}"], {}
            try:
                if rpc(sock, {"op": "ping"}).get("ok"):
                    break
            except (FileNotFoundError, ConnectionRefusedError, ConnectionError, socket.timeout):
                pass
            if time.monotonic() > deadline:
                return ["agentd did not answer a ping within 20 s"], {}
            time.sleep(0.005)
        for conv in convs:
            r = rpc(sock, {"op": "events", "conversation": conv})
            if not r.get("ok"):
                if r.get("error") != "not_found":
                    problems.append(f"events {conv}: {r}")
                continue
            events[(conv, 0)] = None
            for e in r["events"]:
                events[(conv, e["seq"])] = (e["type"], e.get("event_id") or "-", content_hash(e["content"]))
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(harness.scaled(20))
                if rc != 0:
                    problems.append(f"agentd exited {rc} after SIGTERM")
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                problems.append("agentd did not stop within 20 s of SIGTERM")
        try:
            os.killpg(p.pid, signal.SIGKILL)  # any worker left
        except ProcessLookupError:
            pass
        log.close()
    return problems, events


def lost_acks(tr, c, events, present_convs):
    lost = []
    for seq, kind, conv, evseq, etype, eid, h in tr.acks:
        if seq >= c:
            break
        if kind == "create":
            if conv not in present_convs:
                lost.append(f"create {conv} (acknowledged at trace record {seq}): the conversation is missing")
            continue
        got = events.get((conv, evseq))
        want = (etype, eid, h)
        if got != want:
            lost.append(f"{kind} {conv} seq {evseq} {etype} {eid} (acknowledged at trace record {seq}): "
                        + ("missing" if got is None else f"found {got}, acknowledged {want}"))
    return lost


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--must-fail", action="store_true")
    ap.add_argument("--sync", default="full", choices=("full", "none"),
                    help="agentd's sync setting; none is expected to fail (docs/durability.md)")
    ap.add_argument("--images", type=int, default=int(os.environ.get("AGENTD_CRASHSIM_IMAGES", "500")))
    args = ap.parse_args()
    seed = int(os.environ.get("AGENTD_CRASHSIM_SEED") or random.SystemRandom().randrange(1, 2**31))
    print(f"crashsim: seed {seed} (reproduce the crash points with AGENTD_CRASHSIM_SEED={seed}; the workload's "
          f"timing is not reproducible, its trace is kept with AGENTD_KEEP=1)", flush=True)
    if not os.path.exists(SHIM):
        raise SystemExit(f"crashsim: no shim at {SHIM}: build the crashsim_shim target")
    work = tempfile.mkdtemp(prefix="agentd-crashsim-")
    shm = tempfile.mkdtemp(prefix="agentd-crashsim-img-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    ok = False
    try:
        t0 = time.monotonic()
        trace, cfg, nacks, agentd_pids = run_workload(work, args.must_fail, args.sync)
        t1 = time.monotonic()
        tr = Trace(trace)
        tr.prepare()
        convs = sorted({a[2] for a in tr.acks})
        print(f"crashsim: workload {t1 - t0:.1f}s: {tr.n} trace records, {len(tr.writes)} writes, "
              f"{len(tr.flushes)} flushes, {nacks} acknowledgements{' (AGENTD_TEST_ACK_EARLY=1)' if args.must_fail else ''}",
              flush=True)
        assert tr.writes and tr.flushes and tr.acks, "the trace recorded nothing: is the shim loaded?"
        # What the workload must have exercised, or the replay proves less than it says.
        writers = {w["pid"] for w in tr.writes.values()}
        workers = writers - set(agentd_pids)
        seen = {a[4] for a in tr.acks if a[1] == "seen"}
        print(f"crashsim: writes by the two agentds {[sum(w['pid'] == p for w in tr.writes.values()) for p in agentd_pids]},"
              f" by {len(workers)} worker process(es) {sum(w['pid'] in workers for w in tr.writes.values())};"
              f" {sum(w['dsync'] for w in tr.writes.values())} through an O_DSYNC descriptor;"
              f" acknowledged events seen by long-poll: {sorted(seen)}", flush=True)
        assert all(p in writers for p in agentd_pids), "an agentd (before or after the restart) wrote nothing"
        assert workers, "no worker committed a turn"
        assert {"tool_result", "resolution"} <= seen, "no server tool result or no expiry was acknowledged"
        rng = random.Random(seed)
        # Crash points: from agentd's first readiness on (before it, agentd's first start is still making
        # its store and has answered nothing: docs/durability.md) to the trace's end. Half uniform, half just after an
        # acknowledgement (where acknowledging too early shows). Points are drawn until args.images distinct
        # images were checked (many points leave the same image: nothing pending after a flush), or 20 times
        # as many points were drawn; with --must-fail, once lost writes showed in 50 distinct images or more.
        assert tr.ready is not None, "no READY record in the trace"
        lo = tr.ready + 1
        # What a run that must fail expects to see; it stops drawing once that showed (and 50 distinct
        # images were checked).
        expect = "lost" if args.must_fail else "damaged" if args.sync == "none" else None
        ack_points = [a[0] + 1 for a in tr.acks if a[0] + 1 >= lo]
        cache = {}  # image hash -> Future of (problems, events)
        points = []  # (crash point, image hash)
        failures = []
        lost_total = []
        torn_total = 0
        slots = threading.Semaphore(4)  # images built and not yet checked: each is a few MiB

        def check(idx, img):
            try:
                d = os.path.join(shm, f"img{idx}")
                os.makedirs(d)
                with open(os.path.join(d, "data.mdb"), "wb") as f:
                    f.write(img)
                try:
                    res = check_image(d, cfg, convs)
                except Exception as e:  # noqa: BLE001 - reported as the image's problem
                    res = ([f"checking it raised {e!r}"], {})
                if res[0] and harness.KEEP:
                    print(f"crashsim: kept failing image {d}", file=sys.stderr)
                else:
                    shutil.rmtree(d, ignore_errors=True)
                return res
            finally:
                slots.release()

        def lost_in(c, key):
            if not cache[key].done():
                return None
            problems, events = cache[key].result()
            present = {k[0] for k in events if k[1] == 0}
            return [] if problems else lost_acks(tr, c, events, present)

        t2 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            i = 0
            unseen = []  # --must-fail: points whose image is still being checked
            found = False
            while len(cache) < args.images and i < 20 * args.images:
                if expect:
                    left = []
                    for c, k in unseen:
                        if not cache[k].done():
                            left.append((c, k))
                        elif expect == "damaged":
                            found = found or bool(cache[k].result()[0])
                        else:
                            found = found or bool(lost_in(c, k))
                    unseen = left
                    if found and len(cache) >= 50:
                        break
                if i % 2 and ack_points:
                    c = rng.choice(ack_points) + (rng.randrange(3) if rng.random() < 0.3 else 0)
                else:
                    c = rng.randrange(lo, tr.n + 1)
                c = min(c, tr.n)
                img, torn = build_image(tr, c, random.Random(rng.random()))
                key = hashlib.sha1(img).hexdigest()
                if key not in cache:
                    torn_total += torn
                    slots.acquire()
                    cache[key] = ex.submit(check, i, img)
                points.append((c, key))
                unseen.append((c, key))
                i += 1
        for c, key in points:
            problems = cache[key].result()[0]
            if problems:
                failures.append((c, problems))
            else:
                lost = lost_in(c, key)
                if lost:
                    lost_total.append((c, lost))
        t3 = time.monotonic()
        print(f"crashsim: {len(cache)} distinct crash images ({torn_total} torn writes among them) from "
              f"{len(points)} crash points, checked in {t3 - t2:.1f}s; seed {seed}", flush=True)
        if not expect and len(cache) < args.images:
            failures.append((None, [f"only {len(cache)} distinct images from {len(points)} crash points"]))
        for c, problems in failures[:5]:
            print(f"crashsim: image at crash point {c}: " + "; ".join(problems), flush=True)
        for c, lost in lost_total[:5]:
            print(f"crashsim: image at crash point {c} lost {len(lost)} acknowledged write(s): " + "; ".join(lost[:3]),
                  flush=True)
        print(f"crashsim: {len(failures)} damaged images, {len(lost_total)} crash points with lost acknowledged writes",
              flush=True)
        if expect == "lost":
            ok = bool(lost_total)
            print("crashsim: " + ("as expected, acknowledging early lost acknowledged writes" if ok else
                                  "FAILED: acknowledging early lost nothing: the simulator proves nothing"))
        elif expect == "damaged":
            ok = bool(failures)
            print("crashsim: " + ("as expected, sync = none left damaged images" if ok else
                                  "FAILED: sync = none damaged nothing: the image checks prove nothing"))
        else:
            ok = not failures and not lost_total
        return 0 if ok else 1
    finally:
        if harness.KEEP:
            print(f"crashsim: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
