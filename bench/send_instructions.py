#!/usr/bin/env python3
"""send_instructions.py: instructions agentd spends per durable send, workers parked.

The CPU-per-send figure that does not move with the machine's load: agentd
runs under callgrind (valgrind; its workers are not followed), 50
conversations whose model never answers (their workers sit parked in the
model call, as in bench_control's parked row), 50 clients in a closed loop
send to them one at a time each, and callgrind's counters are zeroed after a
warm-up and dumped after N sends. User-space instructions only: the kernel's
share (the reads, the replies' writes, LMDB's page writes and flushes) is not
in it; `perf record -g -p PID` during bench_control's parked row shows that.

usage: bench/send_instructions.py BUILD_DIR [-n SENDS] [-d DIR] [-k]
  BUILD_DIR  where agentd is (a Release build: build-bench)
  -n SENDS   sends counted (default 3000)
  -d DIR     where the scratch directory goes (default BUILD_DIR)
  -k         keep it (callgrind's dump is cg.out.PID.1: callgrind_annotate --inclusive=yes)
"""
import argparse
import glob
import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CLIENTS = 50


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("-n", type=int, default=3000)
    ap.add_argument("-d")
    ap.add_argument("-k", action="store_true")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    d = tempfile.mkdtemp(prefix="send-instructions.", dir=a.d or build)
    sock = os.path.join(d, "agentd.sock")
    cfg = os.path.join(d, "agentd.ini")
    with open(cfg, "w") as f:
        f.write("[model.slow]\ncommand = /bin/sleep 7200\ntimeout = 3h\nretries = 0\n")
    out = os.path.join(d, "cg.out")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out + ".%p",
                          build + "/agentd", "--data", d + "/data", "--socket", sock, "--config", cfg],
                         stdout=open(d + "/agentd.log", "w"), stderr=subprocess.STDOUT)
    try:
        run(a, p, d, sock, out)
    finally:
        if p.poll() is None:  # a clean stop: agentd stops its workers
            p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if not a.k:
            for _ in range(50):  # a worker may still be going away
                try:
                    shutil.rmtree(d)
                    break
                except OSError:
                    time.sleep(0.1)


def connect(sock, p):
    deadline = time.time() + 120
    while time.time() < deadline:
        if p.poll() is not None:
            sys.exit("agentd exited: see its log (-k keeps it)")
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            return s
        except OSError:
            time.sleep(0.1)
    sys.exit("agentd did not listen in 120 s")


def call(s, req):
    s.sendall((json.dumps(req) + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        b = s.recv(1 << 20)
        if not b:
            sys.exit("agentd closed the connection")
        buf += b
    r = json.loads(buf)
    if not r.get("ok"):
        sys.exit("%s failed: %s" % (req["op"], r))
    return r


def load(conns, n):
    """n sends over the connections, each with one in flight."""
    sel = selectors.DefaultSelector()
    line = lambda i: ('{"op":"send","conversation":"s-%d","content":"hello from client %d"}\n' % (i, i)).encode()
    sent = done = 0
    for i, s in enumerate(conns):
        if sent == n:
            break
        s.sendall(line(i))
        sent += 1
        sel.register(s, selectors.EVENT_READ, [i, b""])
    while done < n:
        for k, _ in sel.select():
            i = k.data[0]
            b = k.fileobj.recv(65536)
            if not b:
                sys.exit("agentd closed a connection")
            k.data[1] += b
            while b"\n" in k.data[1]:
                reply, k.data[1] = k.data[1].split(b"\n", 1)
                if b'"ok":true' not in reply:
                    sys.exit("send failed: %r" % reply)
                done += 1
                if sent < n:
                    k.fileobj.sendall(line(i))
                    sent += 1
    sel.close()


def counter(text, name):
    m = re.search(r"^%s (\S+)" % name, text, re.M)
    return float(m.group(1)) if m else 0.0


def run(a, p, d, sock, out):
    c = connect(sock, p)
    for i in range(CLIENTS):
        call(c, {"op": "create", "conversation": "s-%d" % i, "settings": {"model": "slow"}})
    conns = [connect(sock, p) for _ in range(CLIENTS)]
    load(conns, 500)  # every worker spawned and parked in its model call
    time.sleep(1)
    m0 = call(c, {"op": "metrics"})["text"]
    subprocess.run(["callgrind_control", "-z", str(p.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    t0 = time.time()
    load(conns, a.n)
    t1 = time.time()
    subprocess.run(["callgrind_control", "-d", str(p.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    m1 = call(c, {"op": "metrics"})["text"]
    total = None
    for f in glob.glob(out + ".*"):
        with open(f) as fh:
            t = fh.read()
        if "Trigger: dump" in t:
            total = int(re.search(r"^summary: (\d+)", t, re.M).group(1))
    if total is None:
        sys.exit("no callgrind dump")
    commits = counter(m1, "agentd_group_commits_total") - counter(m0, "agentd_group_commits_total")
    writes = counter(m1, "agentd_group_writes_total") - counter(m0, "agentd_group_writes_total")
    print("%d sends, %.1f per group commit, %.1f s under callgrind: %.0f instructions per send "
          "(agentd, user space, every thread)" % (a.n, writes / commits if commits else 0, t1 - t0, total / a.n))
    if a.k:
        print("kept: %s" % d)


if __name__ == "__main__":
    main()
