#!/usr/bin/env python3
"""soak_retention.py: an LMDB store under churn, with retention and without.

Clients in a closed loop each create a conversation, send it MSGS messages of SIZE bytes (the echo model
answers each), end it, and start the next. With retention (remove_ended_after = 1s, a pass every second)
the ended conversations are removed and their pages reused; the same churn without retention (today's
behaviour for a store nobody cleans) keeps everything. Each run goes on until the bytes sent reach TIMES
the data file's size (at least MIN seconds; the run without retention lasts as long), sampling every
second: the bytes sent so far, data.mdb's size,
status's store.size_bytes (the high-water mark of pages in use), the conversations alive (not yet removed)
and the sends per second. It prints the samples, then for each run the file's size at the end, the live
data at the end (live conversations x the bytes each holds), and the send rate of the first and the last
five seconds (median of per-second rates). Last, `agentd compact` on the store with retention: the bytes
given back.

usage: bench/soak_retention.py BUILD_DIR [-q] [-d DIR] [--times N] [--size BYTES] [--msgs N] [--clients N]
  BUILD_DIR  where agentd is (a Release build: build-bench)
  -q         a quick smoke run (times 3, at least 5 s)
  -d DIR     where the scratch directories go (default BUILD_DIR; on disk, not tmpfs)
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rw")

    def ask(self, obj):
        self.f.write(json.dumps(obj) + "\n")
        self.f.flush()
        r = json.loads(self.f.readline())
        if not r.get("ok"):
            raise RuntimeError(f"{obj['op']}: {r}")
        return r


def wait_answered(c, conv, n, deadline):
    """Until the echo model has answered n sends (its turns committed)."""
    while time.monotonic() < deadline:
        if c.ask({"op": "get", "conversation": conv})["conversation"]["usage"]["turns"] >= n:
            return
        time.sleep(0.002)
    raise RuntimeError(f"{conv}: no answer")


def run(build, scratch, retention, args, secs=None):
    """One churn run: with retention until TIMES the file's size is sent (at least MIN s); without it, for
    secs (the retention run's length: nothing removed, the file grows with what is sent)."""
    d = tempfile.mkdtemp(prefix="soak-", dir=scratch)
    data, sock = os.path.join(d, "data"), os.path.join(d, "agentd.sock")
    cfg = os.path.join(d, "agentd.ini")
    with open(cfg, "w") as f:
        f.write("[agentd]\nidle_timeout = 200ms\n")
        if retention:
            f.write("remove_ended_after = 1s\nretention_interval = 1s\n")
    log = open(os.path.join(d, "agentd.log"), "w")
    p = subprocess.Popen([os.path.join(build, "agentd"), "--data", data, "--socket", sock, "--config", cfg],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1000):  # until it listens
        try:
            Conn(sock).s.close()
            break
        except OSError:
            time.sleep(0.01)
    else:
        p.kill()
        raise SystemExit(f"soak: agentd did not start (log: {d}/agentd.log)")
    stop = threading.Event()
    sent = [0] * args.clients
    made = [0] * args.clients
    text = "x" * args.size
    errors = []

    def client(i):
        try:
            c = Conn(sock)
            while not stop.is_set():
                conv = f"s{i}-{made[i]}"
                made[i] += 1
                c.ask({"op": "create", "conversation": conv, "settings": {"model": "echo"}})
                for k in range(args.msgs):
                    c.ask({"op": "send", "conversation": conv, "content": {"text": text}})
                    sent[i] += 1
                    wait_answered(c, conv, k + 1, time.monotonic() + 60)
                c.ask({"op": "update", "conversation": conv, "status": "ended"})
        except Exception as e:  # noqa: BLE001
            if not stop.is_set():
                errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    mon = Conn(sock)
    samples = []
    t0 = time.monotonic()
    last = 0
    while True:
        time.sleep(1)
        now = time.monotonic() - t0
        st = mon.ask({"op": "status"})
        n = sum(sent)
        fsize = os.path.getsize(os.path.join(data, "data.mdb"))
        live, after = 0, None
        while True:
            r = mon.ask({"op": "list", "limit": 1000, **({"after": after} if after else {})})
            live += len(r["conversations"])
            if not r.get("next"):
                break
            after = r["next"]
        written = n * args.size * 2  # the message and its echo
        samples.append((now, written, fsize, st["store"]["size_bytes"], live, n - last))
        last = n
        if errors or (secs is None and now >= args.min and written >= args.times * fsize) or \
                (secs is not None and now >= secs):
            break
    stop.set()
    for t in threads:
        t.join(60)
    mon.f.close()
    p.terminate()
    p.wait(30)
    log.close()
    if errors:
        raise SystemExit(f"soak: a client failed: {errors[0]} (log: {d}/agentd.log)")
    return d, samples


def mib(b):
    return b / (1 << 20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("-q", action="store_true")
    ap.add_argument("-d", default=None)
    ap.add_argument("--times", type=float, default=10)
    ap.add_argument("--min", type=float, default=30)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--msgs", type=int, default=4)
    ap.add_argument("--clients", type=int, default=4)
    args = ap.parse_args()
    if args.q:
        args.times, args.min = 3, 5
    scratch = args.d or args.build
    per_conv = args.msgs * args.size * 2
    results = {}
    secs = None
    for retention in (True, False):
        name = "retention" if retention else "no retention"
        d, samples = run(args.build, scratch, retention, args, secs)
        secs = samples[-1][0]
        results[name] = (d, samples)
        print(f"soak ({name}): {args.clients} clients, conversations of {args.msgs} x {args.size} B sends "
              f"(+ echoes: {per_conv} B each)")
        print("  t s   written MiB   data.mdb MiB   size_bytes MiB   live convs   sends/s")
        for t, w, f, sb, live, rate in samples:
            print(f"  {t:5.0f}  {mib(w):11.1f}  {mib(f):13.2f}  {mib(sb):15.2f}  {live:11d}  {rate:8d}")
    print()
    for name, (d, samples) in results.items():
        t, w, f, sb, live, _ = samples[-1]
        rates = [s[5] for s in samples]
        first, end = statistics.median(rates[:5]), statistics.median(rates[-5:])
        print(f"soak ({name}): after {t:.0f} s and {mib(w):.1f} MiB sent: data.mdb {mib(f):.2f} MiB "
              f"({w / f:.1f}x written), live data {mib(live * per_conv):.2f} MiB in {live} conversations; "
              f"sends/s first 5 s {first:.0f}, last 5 s {end:.0f} (ratio {end / first if first else 0:.2f})")
    d, _ = results["retention"]
    c = subprocess.run([os.path.join(args.build, "agentd"), "compact", "--data", os.path.join(d, "data")],
                       capture_output=True, text=True)
    print(f"soak (retention): {c.stdout.strip() or c.stderr.strip()}")
    for d, _ in results.values():
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
