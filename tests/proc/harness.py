"""harness.py: run the real agentd, its workers and agentctl for process-level tests.

Process tests are plain Python 3 scripts (standard library only) run by ctest; each exits non-zero on
failure. They import this module, start agentd in a fresh temporary directory, drive it through the real
control socket (docs/protocol.md), kill real processes and assert the invariants afterwards.

    import harness
    from harness import Agentd, wait_for

    def test_send_is_answered():
        with Agentd() as a:
            c = a.ok({"op": "create", "settings": {"model": "echo"}})["conversation"]
            seq = a.ok({"op": "send", "conversation": c, "content": "hi"})["seq"]
            wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo model's reply")
            rc, out, err = a.ctl("events", c)
            assert out.splitlines()[0] == '1 user_msg {"text":"hi"}', out

    harness.main(globals())        # runs every test_* function in order; exit status 1 if any failed

Binaries: $AGENTD_BIN and $AGENTCTL_BIN when set, else agentd and agentctl in $AGENTD_BUILD_DIR, else in
build/ at the repository root (found from this file's location). A build elsewhere (the ASan build in
build-asan/) sets AGENTD_BUILD_DIR or the two variables.

Environment:
  AGENTD_TEST_SLOW  multiplies every timeout (default 1; scripts/test.sh uses 3 under ASan). Nothing here
                    sleeps a fixed time: waits poll a condition until a deadline, and only the deadline
                    scales.
  AGENTD_VALGRIND   when set, agentd runs under valgrind memcheck (suppressions: tests/valgrind.supp); a
                    report fails the test. Set AGENTD_TEST_SLOW too (ctest's valgrind_* tests use 10).
  AGENTD_VALGRIND_WORKERS  with AGENTD_VALGRIND, agentd's workers run under memcheck too (agentd is given
                    a --worker script, DIR/valgrind-worker.sh, that execs agentd-worker inside valgrind).
  AGENTD_KEEP       when set, temporary directories (data, logs, scripts, configuration) are kept and
                    their paths printed.
  AGENTD_TEST_STORE=pg  every agentd runs on PostgreSQL: `--store TARGET --run-dir DIR` instead of
                    `--data DIR`. The first Agentd starts a throwaway cluster (tests/pg/cluster.sh, in a
                    temporary directory, stopped by its pid at exit) unless AGENTD_TEST_PG gives a conninfo
                    prefix of a running one; each data directory gets a database of its own (two Agentds
                    on one data_dir share it, as they would share the LMDB files), and DIR keeps what
                    agentd keeps in a run directory (socket, pid file, locks). run_agentd("check",
                    "--data", DIR) checks DIR's database. Tests about LMDB itself carry @lmdb_only(why):
                    on PostgreSQL they are reported as "n/a" with the reason, not run.

API:
  TIME_SCALE, scaled(secs)      the multiplier, and secs times it
  wait_for(pred, timeout, what, interval=0.01, ignore=())
                                poll pred() until it returns something truthy, and return that; past the
                                (scaled) timeout raise AssertionError("timed out after Ns waiting for WHAT").
                                Exceptions of the types in `ignore` count as "not yet".
  write_config(dir, text, name="agentd.ini") -> path    an INI file (text is dedented)
  write_script(dir, name, body) -> path                 an executable Python 3 script (body dedented)
  proc_stat(pid) -> (state, ppid) or None; pid_alive(pid); open_fds(pid) -> {fd: target}
                                (valgrind's own descriptors left out under AGENTD_VALGRIND)
  sanitizer_reports(text) -> [line]   ASan/LSan/UBSan report lines in text
  VALGRIND, valgrind_prefix(log_file) whether AGENTD_VALGRIND is set; the memcheck command prefix
  run_agentd(*args, **run_kw)         a one-shot `agentd ARGS` (check, --help) as subprocess.run, under
                                      memcheck with AGENTD_VALGRIND (a report raises AssertionError)
  PG, pg_target(data_dir) -> str      whether AGENTD_TEST_STORE=pg; the PostgreSQL target of a data
                                      directory (its database, created at first use)
  pg_sql(sql, dbname="postgres") -> str   one statement through psql on the test cluster; its output
  lmdb_only(why)                      a decorator: the test is about LMDB files, not run on PostgreSQL

  Agentd(data_dir=None, config=None, extra_args=(), start=True, env=None, launcher=(), lmdb=False)
    Starts `agentd --data DIR/data --socket DIR/data/agentd.sock [--config FILE] EXTRA...` in a fresh
    tempfile.mkdtemp() (the data directory is DIR/data unless data_dir is given: the sandbox hides it from
    tools, and DIR holds what tests share with them) and waits until the socket answers a ping. config is
    INI text (written to DIR/agentd.ini) or a pathlib.Path to an existing file. The socket is
    DIR/data/agentd.sock; with data_dir given (two instances on one directory, say), DIR/agentd.sock.
    stdout and stderr go to DIR/agentd.log (appended across restarts). agentd gets a new session and
    PR_SET_PDEATHSIG, so a test killed by ctest's timeout does not leave it running. With start=False,
    write scripts and the configuration first, then call start(). launcher is a command prefix
    (e.g. a script that sets a resource limit, then execs its arguments): it runs the whole agentd
    command, valgrind included under AGENTD_VALGRIND, so what it sets applies to valgrind and agentd
    alike; .launcher can also be set before a start().
    lmdb=True keeps this one on LMDB under AGENTD_TEST_STORE=pg (a test moving a store between the two).
    .dir .data_dir .socket .log_path .config_path   paths
    .proc .pid                    the running agentd (Popen and pid)
    .start()                      start (again) and wait for readiness; raises with the log tail if agentd exits
    .expect_exit(timeout=10) -> rc    start agentd expecting it to exit by itself (bad configuration,
                                  second instance on a data directory); .log() says why
    .request(obj, timeout=10)     one request on a fresh connection -> reply dict
    .ok(obj)                      .request, asserting ok:true -> reply dict
    .conn(timeout=10) -> Client   a persistent connection (see Client)
    .ctl(*args, check=True, input=None, timeout=30) -> (rc, stdout, stderr)
                                  the real agentctl with -s SOCKET; check=True asserts rc == 0; a
                                  sanitizer report on its stderr always fails
    .create(model="echo", **fields) -> id; .send(conv, content, **fields) -> seq; .events(conv, **fields)
                                  thin conveniences over .ok
    .watch(conv, after=None) -> Client   a started watch (reply checked); recv() the streamed lines
    .children() -> [pid]          direct children of agentd (from /proc/*/stat ppid), sorted
    .zombies() -> [pid]           children in state Z (a short-lived one is normal: wait_for(lambda: not a.zombies()))
    .worker_pid(conv) -> pid|None from `get`
    .worker_program() -> path     the agentd-worker agentd runs (under AGENTD_VALGRIND_WORKERS, the memcheck
                                  script): what a test's --worker wrapper execs for the real worker
    .kill(sig=SIGKILL, wait=None) signal agentd; waits for exit (and reaps) by default for SIGKILL
    .wait(timeout=10) -> rc       wait for agentd to exit
    .stop(timeout=10, expect=0) -> rc
                                  SIGTERM, wait; asserts the exit status is `expect` (None: any) and that
                                  the log holds no sanitizer report
    .check_sanitizers()           AssertionError if agentd's log holds a sanitizer report
    .restart(**start_kw)          stop (if running), then start again on the same data directory
    .running() -> bool
    .log() -> str                 agentd's output so far
    .script(name, body) -> path   write_script into DIR/scripts
    .gated_model(name="gated", gate="go") -> gate path   configure a model that answers "done" once DIR/GATE exists
    .write_config(text) -> path   write DIR/agentd.ini and use it from the next start
    .close()                      kill agentd if running, and every process left in the process groups of
                                  the agentds it started; remove DIR unless AGENTD_KEEP
    As a context manager: on a clean exit, stop() (asserting exit status 0) then close(); after an
    exception, print the log tail, kill, close.

  Client(path, timeout=10)        one connection to the socket
    .send(obj) -> bool            one request line (json, compact); pipelining: send several, recv several
    .raw(data: bytes) -> bool     bytes exactly as given (no newline added)
                                  both return False instead of raising when agentd closed the connection
                                  first (after a too_large reply, say): the reply can still be recv()'d
    .recv(timeout=None) -> dict   the next line, parsed; AssertionError on timeout or end of stream
    .recv_line(timeout=None) -> bytes   the next line without its newline
    .request(obj) -> dict         send + recv
    .closed(timeout=None) -> bool wait for agentd to close the connection (True) or the timeout (False);
                                  lines still arriving are discarded
    .sock                         the socket itself, for tests of misbehaving clients
    .close(); context manager

Cleanup: atexit kills any agentd still running and removes temporary directories (unless AGENTD_KEEP).
When a test fails with an exception, the tail of each agentd log is printed to stderr.
"""

import atexit
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback

__all__ = [
    "TIME_SCALE", "scaled", "wait_for", "write_config", "write_script", "proc_stat", "pid_alive",
    "open_fds", "sanitizer_reports", "VALGRIND", "valgrind_prefix", "run_agentd", "Agentd", "Client", "main",
    "REPO", "AGENTD_BIN", "AGENTCTL_BIN", "PG", "pg_target", "pg_sql", "lmdb_only",
]

REPO = pathlib.Path(__file__).resolve().parents[2]
_BUILD = pathlib.Path(os.environ.get("AGENTD_BUILD_DIR") or REPO / "build")
AGENTD_BIN = os.environ.get("AGENTD_BIN") or str(_BUILD / "agentd")
AGENTCTL_BIN = os.environ.get("AGENTCTL_BIN") or str(_BUILD / "agentctl")


def _time_scale():
    raw = os.environ.get("AGENTD_TEST_SLOW", "").strip()
    if not raw:
        return 1.0
    try:
        v = float(raw)
    except ValueError:
        raise SystemExit(f"harness: AGENTD_TEST_SLOW must be a number, got {raw!r}")
    if not v > 0:
        raise SystemExit(f"harness: AGENTD_TEST_SLOW must be positive, got {raw!r}")
    return v


TIME_SCALE = _time_scale()
VALGRIND = bool(os.environ.get("AGENTD_VALGRIND"))
VALGRIND_WORKERS = VALGRIND and bool(os.environ.get("AGENTD_VALGRIND_WORKERS"))
VALGRIND_SUPP = str(REPO / "tests" / "valgrind.supp")
KEEP = bool(os.environ.get("AGENTD_KEEP"))
PG = os.environ.get("AGENTD_TEST_STORE", "").strip().lower() in ("pg", "postgresql")
SUN_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


def scaled(secs):
    """secs times AGENTD_TEST_SLOW: every timeout in the harness goes through this."""
    return secs * TIME_SCALE


def wait_for(pred, timeout=10, what="a condition", interval=0.01, ignore=()):
    """Poll pred() until it returns something truthy and return that value. Past the deadline (timeout
    seconds, scaled) raise AssertionError naming `what`. Exceptions of the types in `ignore` count as
    "not yet"; the last one is mentioned in the failure. The poll interval grows from `interval` to
    at most 0.1 s, so a fast condition is seen fast and a slow one does not spin."""
    deadline = time.monotonic() + scaled(timeout)
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except ignore as e:  # noqa: PERF203 (polling is the point)
            last_exc = e
        now = time.monotonic()
        if now >= deadline:
            msg = f"timed out after {scaled(timeout):g}s waiting for {what}"
            if last_exc is not None:
                msg += f" (last error: {last_exc!r})"
            raise AssertionError(msg)
        time.sleep(min(interval, deadline - now))
        interval = min(interval * 1.5, 0.1)


def write_config(directory, text, name="agentd.ini"):
    """Write an INI configuration file (text dedented, so it can be indented in the test) and return its
    path as a string."""
    path = pathlib.Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return str(path)


def _python_shebang():
    exe = sys.executable
    if exe and os.path.isabs(exe) and not any(c.isspace() for c in exe) and len(exe) < 120:
        return "#!" + exe
    return "#!/usr/bin/env python3"


def write_script(directory, name, body):
    """Write an executable Python 3 script (a model or tool adapter for agentd's configuration) and return
    its absolute path. body is dedented; the shebang is this interpreter's path (a python3), so the script
    runs the same Python as the test."""
    path = pathlib.Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_python_shebang() + "\n" + textwrap.dedent(body).lstrip("\n"))
    path.chmod(0o755)
    return str(path.resolve())


def proc_stat(pid):
    """(state, ppid) of a process from /proc/PID/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself hold spaces and ')': split after the last ')'.
    rest = data[data.rindex(b")") + 2:].split()
    return rest[0].decode(), int(rest[1])


def pid_alive(pid):
    """True while the pid exists and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _nofile_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        for ln in f:
            if ln.startswith("Max open files"):
                return int(ln.split()[3])
    return None


def open_fds(pid):
    """{fd: link target} of a process's open descriptors ('socket:[123]', '/path', 'pipe:[9]', ...).
    Under AGENTD_VALGRIND, valgrind's own descriptors in a process it runs are left out: the ones it
    keeps in the top 12 of the real RLIMIT_NOFILE (the program sees a limit below them) and its log
    file (valgrind 3.19 leaves it open at a low descriptor too)."""
    out = {}
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            out[int(name)] = os.readlink(f"{base}/{name}")
        except FileNotFoundError:
            pass  # closed while we looked
    if VALGRIND:
        limit = _nofile_limit(pid)
        out = {fd: t for fd, t in out.items()
               if not (limit is not None and fd >= limit - 12)
               and not re.fullmatch(r"valgrind\.(worker\.)?\d+\.log", os.path.basename(t))}
    return out


# What ASan, LSan and UBSan print. Under the sanitizer build any of these fails the test (style.md): a
# report in agentd's log (agentd's and its workers' stderr) or in agentctl's stderr is never benign.
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: AddressSanitizer", "ERROR: UndefinedBehaviorSanitizer")


def sanitizer_reports(text):
    """The lines of text that are sanitizer reports (empty when clean)."""
    return [ln for ln in text.splitlines() if any(m in ln for m in SANITIZER_MARKERS)]


def valgrind_prefix(log_file):
    """The memcheck command prefix AGENTD_VALGRIND runs agentd with: exit status 99 on any error or
    definite leak, the report in log_file ('%p' there is the pid), tests/valgrind.supp applied."""
    # --vgdb=no: no gdbserver FIFOs in /tmp, which a process killed with -9 would leave behind.
    return ["valgrind", "--quiet", "--vgdb=no", "--error-exitcode=99", "--leak-check=full",
            "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
            f"--suppressions={VALGRIND_SUPP}", f"--log-file={log_file}"]


# Valgrind 3.19 does not know pidfd_open (434) and says so, once per call, in a log that is otherwise
# only reports. Not an error: the call fails with ENOSYS and the worker watches its child by polling
# waitid instead (agent/proc.c, NOPIDFD_TICK), the path a kernel before 5.3 takes. Any other unhandled
# syscall still fails the test: what our code does then is not known.
_VALGRIND_NOTICE = re.compile(
    r"^--\d+-- WARNING: unhandled amd64-linux syscall: 434\n"
    r"(--\d+-- (You may be able to write your own handler\.|Read the file README_MISSING_SYSCALL_OR_IOCTL\."
    r"|Nevertheless we consider this a bug\.  Please report|it at http://valgrind\.org/support/bug_reports\.html\.)\n)*",
    re.M)


def valgrind_report(text):
    """A valgrind log file's text without the notices that are not reports (empty when clean)."""
    return _VALGRIND_NOTICE.sub("", text).strip()


# ----------------------------------------------------------------------------------------------------
# PostgreSQL (AGENTD_TEST_STORE=pg)

_pg = {"prefix": os.environ.get("AGENTD_TEST_PG") or None, "dir": None, "dbs": {}}
_CLUSTER_SH = str(REPO / "tests" / "pg" / "cluster.sh")


def _pg_prefix():
    """The conninfo prefix of the test cluster, started at the first call (one per test process)."""
    if _pg["prefix"] is None:
        d = tempfile.mkdtemp(prefix="agentd-pg-", dir="/tmp")  # reachable by nobody when run as root
        _pg["dir"] = d
        p = subprocess.run(["bash", _CLUSTER_SH, "start", d], capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError(f"cannot start the test PostgreSQL cluster: {p.stderr.strip()}")
        _pg["prefix"] = p.stdout.strip()
    return _pg["prefix"]


def _pg_stop():
    if _pg["dir"]:
        subprocess.run(["bash", _CLUSTER_SH, "stop", _pg["dir"]], capture_output=True)
        if not KEEP:
            shutil.rmtree(_pg["dir"], ignore_errors=True)
        _pg["dir"] = None


def pg_sql(sql, dbname="postgres"):
    """Run one SQL statement on the test cluster (psql, unaligned, tuples only); its output."""
    p = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", f"{_pg_prefix()} dbname={dbname}",
                        "-c", sql], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"psql {sql!r}: {p.stderr.strip()}")
    return p.stdout.strip()


def pg_target(data_dir):
    """The PostgreSQL target standing for data_dir: a database of its own, created at first use."""
    key = os.path.realpath(str(data_dir))
    if key not in _pg["dbs"]:
        name = f"t{len(_pg['dbs']) + 1}"
        pg_sql(f"CREATE DATABASE {name}")
        _pg["dbs"][key] = f"{_pg_prefix()} dbname={name}"
    return _pg["dbs"][key]


def lmdb_only(why):
    """Mark a test as being about LMDB's files (data.mdb, the map, mdb_* tools): under
    AGENTD_TEST_STORE=pg, main() reports it as n/a with `why` instead of running it."""
    def mark(fn):
        fn.lmdb_only = why
        return fn
    return mark


def _pg_args(args):
    # `check --data DIR` of a data directory that stands for a database checks that database.
    args = list(map(str, args))
    if PG and args[:1] == ["check"]:
        for i, a in enumerate(args[:-1]):
            if a == "--data" and os.path.realpath(args[i + 1]) in _pg["dbs"]:
                args[i:i + 2] = ["--store", _pg["dbs"][os.path.realpath(args[i + 1])]]
                break
    return args


def run_agentd(*args, **kw):
    """subprocess.run([AGENTD_BIN, *args], **kw) for a one-shot command (`agentd check`, `--help`):
    under AGENTD_VALGRIND inside memcheck, and AssertionError with its report when it made one."""
    args = _pg_args(args)
    if not VALGRIND:
        return subprocess.run([AGENTD_BIN, *map(str, args)], **kw)
    fd, log_file = tempfile.mkstemp(prefix="agentd-valgrind-", suffix=".log")
    os.close(fd)
    try:
        p = subprocess.run(valgrind_prefix(log_file) + [AGENTD_BIN, *map(str, args)], **kw)
        with open(log_file, errors="replace") as f:
            report = valgrind_report(f.read())
    finally:
        os.unlink(log_file)
    assert not report and p.returncode != 99, f"valgrind report from agentd {' '.join(map(str, args))}:\n{report}"
    return p


def _mkdtemp():
    # The socket path must fit sun_path: fall back to /tmp when $TMPDIR is deep.
    d = tempfile.mkdtemp(prefix="agentd-test-")
    if len(os.path.join(d, "agentd.sock")) > SUN_PATH_MAX - 16:
        os.rmdir(d)
        d = tempfile.mkdtemp(prefix="agentd-test-", dir="/tmp")
    return d


# ----------------------------------------------------------------------------------------------------
# Client


class Client:
    """One connection to agentd's control socket. Lines are JSON, one per request or reply; lines can be
    long (up to the server's limit, 1 MiB by default, and replies can be longer)."""

    def __init__(self, path, timeout=10):
        self.path = str(path)
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(scaled(timeout))
        try:
            self.sock.connect(self.path)
        except OSError:
            self.sock.close()
            raise
        self._buf = bytearray()
        self._scan = 0
        self.eof = False
        self.send_error = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def raw(self, data):
        """Send bytes exactly as given. Returns True when all were written, False when agentd closed the
        connection first (EPIPE/ECONNRESET, kept in .send_error): what it replied before closing can still
        be read with recv()."""
        try:
            self.sock.sendall(bytes(data))
            return True
        except (BrokenPipeError, ConnectionResetError) as e:
            self.send_error = e
            return False
        except socket.timeout:
            raise AssertionError(f"agentd did not read {len(data)} bytes within {scaled(self.timeout):g}s")

    def send(self, obj):
        """Send one request: obj as compact JSON and a newline. Returns as raw() does."""
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        return self.raw(line)

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
        self._buf += data

    def recv_line(self, timeout=None):
        """The next line without its newline (bytes). AssertionError when none arrives in time, or when
        agentd closes the connection first."""
        t = scaled(self.timeout if timeout is None else timeout)
        deadline = time.monotonic() + t
        while True:
            nl = self._buf.find(b"\n", self._scan)
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                self._scan = 0
                return line
            self._scan = len(self._buf)
            if self.eof:
                tail = f" (after a partial line of {len(self._buf)} bytes)" if self._buf else ""
                raise AssertionError(f"agentd closed the connection before a full line{tail}")
            try:
                self._fill(deadline)
            except socket.timeout:
                raise AssertionError(f"no line from agentd within {t:g}s") from None

    def recv(self, timeout=None):
        """The next line, parsed as JSON (a reply, or a streamed {"event"}/{"delta"} line)."""
        line = self.recv_line(timeout)
        try:
            return json.loads(line)
        except ValueError as e:
            raise AssertionError(f"agentd sent a line that is not JSON ({e}): {line[:200]!r}") from None

    def request(self, obj, timeout=None):
        self.send(obj)
        return self.recv(timeout)

    def closed(self, timeout=None):
        """Wait until agentd closes the connection: True, or False at the timeout. Anything it still sends
        is discarded."""
        t = scaled(self.timeout if timeout is None else timeout)
        deadline = time.monotonic() + t
        while not self.eof:
            try:
                self._fill(deadline)
            except socket.timeout:
                return False
            except OSError:
                return True
            del self._buf[:]
            self._scan = 0
        return True


# ----------------------------------------------------------------------------------------------------
# Agentd

_instances = []
_failed = False


def _find_prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


# Resolved here, not in the child: importing after fork can deadlock on a lock another thread held.
_prctl = _find_prctl()
_PR_SET_PDEATHSIG = 1


def _pdeathsig():
    """In the child before exec: die with the test. ctest's timeout kills the Python process, and atexit
    does not run then, so without this an agentd would outlive its test. (The signal comes when the
    *thread* that started agentd exits: start agentd from the main thread.)"""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class Agentd:
    def __init__(self, data_dir=None, config=None, extra_args=(), start=True, env=None, launcher=(), lmdb=False):
        self.dir = _mkdtemp()
        self.lmdb = lmdb  # on LMDB even under AGENTD_TEST_STORE=pg
        # DIR/data, not DIR: tools run sandboxed, and the sandbox hides the data directory from them; the
        # scripts, gates and files tests share with their tools stay in DIR.
        self.data_dir = str(data_dir) if data_dir is not None else os.path.join(self.dir, "data")
        os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
        self.socket = os.path.join(self.data_dir if data_dir is None else self.dir, "agentd.sock")
        self.log_path = os.path.join(self.dir, "agentd.log")
        self.extra_args = list(extra_args)
        self.launcher = list(launcher)
        self.env = dict(os.environ if env is None else env)
        self.proc = None
        self._groups = []  # every agentd started: each leads a process group (see _spawn)
        self.config_path = None
        self._closed = False
        if isinstance(config, pathlib.PurePath):
            self.config_path = str(config)
        elif config is not None:
            self.write_config(config)
        _instances.append(self)
        if start:
            self.start()

    # -- lifecycle -----------------------------------------------------------------------------------

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def store_args(self):
        """How this agentd is given its store: --data DIR, or under AGENTD_TEST_STORE=pg the data
        directory's database and DIR as the run directory."""
        if PG and not self.lmdb:
            return ["--store", pg_target(self.data_dir), "--run-dir", self.data_dir]
        return ["--data", self.data_dir]

    def check_args(self):
        """How `agentd check` (or another offline command) is given this agentd's store."""
        if PG and not self.lmdb:
            return ["--store", pg_target(self.data_dir)]
        return ["--data", self.data_dir]

    def command(self):
        args = [AGENTD_BIN, *self.store_args(), "--socket", self.socket]
        if VALGRIND:
            # agentd under memcheck; any error or definite leak makes it exit 99, which stop()
            # reports. /proc/self/exe is valgrind's then, so name the worker explicitly.
            args = valgrind_prefix(f"{self.dir}/valgrind.%p.log") + args + ["--worker", self.worker_program()]
        if self.config_path:
            args += ["--config", self.config_path]
        return self.launcher + args + self.extra_args

    def worker_program(self):
        """The agentd-worker agentd runs: the built one, or under AGENTD_VALGRIND_WORKERS the script that
        runs it inside memcheck. A test's --worker wrapper execs this for the real worker, so that worker
        stays under memcheck."""
        worker = os.path.join(os.path.dirname(AGENTD_BIN), "agentd-worker")
        if PG and os.path.exists(worker + "-dynamic"):
            worker += "-dynamic"  # the static worker has no libpq
        if not VALGRIND_WORKERS:
            return worker
        # A statically linked agentd-worker hides malloc from memcheck: the build's dynamic twin is the same
        # program (CMakeLists.txt, AGENTD_STATIC_WORKER).
        dynamic = worker + "-dynamic"
        return self._valgrind_worker(dynamic if os.path.exists(dynamic) else worker)

    def _valgrind_worker(self, worker):
        """A --worker program that execs agentd-worker under memcheck (same pid, same descriptors):
        its reports go to DIR/valgrind.worker.PID.log, which check_sanitizers() reads too."""
        path = os.path.join(self.dir, "valgrind-worker.sh")
        if not os.path.exists(path):
            cmd = valgrind_prefix(f"{self.dir}/valgrind.worker.%p.log") + [worker]
            with open(path, "w") as f:
                f.write("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in cmd) + ' "$@"\n')
            os.chmod(path, 0o755)
        return path

    def _spawn(self, note):
        if not os.access(AGENTD_BIN, os.X_OK):
            raise AssertionError(f"no agentd binary at {AGENTD_BIN}: build it, or set AGENTD_BIN / AGENTD_BUILD_DIR")
        with open(self.log_path, "ab") as log:
            log.write(f"--- harness: starting {' '.join(self.command())}{note}\n".encode())
            log.flush()
            # A new session: signals sent to the test's terminal or group do not reach agentd, and
            # cleanup can kill agentd's whole group.
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.dir,
                env=self.env, start_new_session=True, preexec_fn=_pdeathsig)
        self._groups.append(self.proc.pid)

    def start(self, timeout=10):
        """Start agentd and wait (polling, up to timeout seconds, scaled) until the socket answers a ping.
        Raises AssertionError with the log tail when agentd exits or never answers."""
        assert not self.running(), "agentd is already running"
        self._spawn("")

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"agentd exited with status {self.proc.returncode} before it was ready\n{self.log_tail()}")
            try:
                with Client(self.socket, timeout=timeout) as c:
                    r = c.request({"op": "ping", "id": "harness-ready"})
                return r.get("ok") is True
            except (FileNotFoundError, ConnectionRefusedError):
                return False  # not listening yet

        try:
            wait_for(ready, timeout, "agentd to answer a ping on " + self.socket)
        except AssertionError as e:
            if self.running():
                self._kill_group(signal.SIGKILL)
                self.proc.wait()
                raise AssertionError(f"{e}\n{self.log_tail()}") from None
            raise
        return self

    def expect_exit(self, timeout=10):
        """Start agentd expecting it to exit by itself (a bad configuration, a second instance on the
        same data directory, a socket path too long) and return its exit status; agentd.log holds what
        it said (self.log()). AssertionError if it is still running after timeout seconds (scaled)."""
        assert not self.running(), "agentd is already running"
        self._spawn(" (expecting it to exit)")
        try:
            return self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            self._kill_group(signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"agentd did not exit by itself within {scaled(timeout):g}s\n{self.log_tail()}") from None

    def wait(self, timeout=10):
        """Wait for agentd to exit; return its status (negative: killed by that signal)."""
        assert self.proc is not None, "agentd was never started"
        try:
            return self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"agentd (pid {self.pid}) still running after {scaled(timeout):g}s") from None

    def kill(self, sig=signal.SIGKILL, wait=None):
        """Send sig to agentd (not to its workers). For SIGKILL (or wait=True) wait for it to exit and
        reap it, returning its status."""
        assert self.running(), "agentd is not running"
        os.kill(self.pid, sig)
        if wait is None:
            wait = sig == signal.SIGKILL
        return self.wait() if wait else None

    def stop(self, timeout=10, expect=0):
        """SIGTERM, then wait up to timeout seconds (scaled). Asserts the exit status is `expect` (0 by
        default: a clean stop; None to accept any) and returns it. If agentd does not exit in time it is
        killed and AssertionError raised."""
        if not self.running():
            rc = self.proc.returncode if self.proc else None
        else:
            os.kill(self.pid, signal.SIGTERM)
            try:
                rc = self.proc.wait(scaled(timeout))
            except subprocess.TimeoutExpired:
                self._kill_group(signal.SIGKILL)
                self.proc.wait()
                raise AssertionError(
                    f"agentd did not exit within {scaled(timeout):g}s of SIGTERM\n{self.log_tail()}") from None
        if expect is not None:
            assert rc == expect, f"agentd exited with status {rc}, expected {expect}\n{self.log_tail()}"
        self.check_sanitizers()
        return rc

    def check_sanitizers(self):
        """AssertionError when agentd's log holds a sanitizer report (see SANITIZER_MARKERS). stop() and
        main() call it; a test that SIGKILLs agentd can call it too."""
        reports = sanitizer_reports(self.log())
        for name in sorted(os.listdir(self.dir)) if os.path.isdir(self.dir) else []:
            if name.startswith("valgrind.") and os.path.getsize(os.path.join(self.dir, name)):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    report = valgrind_report(f.read())
                if report:
                    reports.append(f"valgrind ({name}):\n" + report[-3000:])
        assert not reports, "sanitizer report in agentd's log:\n" + "\n".join(reports[:5]) + "\n" + self.log_tail(80)

    def restart(self, timeout=10, expect=0, **start_kw):
        """Stop agentd if it is running (asserting `expect` as stop() does), then start it again on the
        same data directory and socket."""
        if self.running():
            self.stop(timeout, expect)
        return self.start(**start_kw)

    def _kill_group(self, sig, pgid=None):
        # agentd leads its own session (start_new_session): its group is agentd and whatever it spawned
        # without changing group, so this catches workers too. Only for cleanup and failures.
        try:
            os.killpg(self.pid if pgid is None else pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self):
        """Kill agentd if it is still running, then remove the temporary directory (unless AGENTD_KEEP)."""
        if self._closed:
            return
        self._closed = True
        if self.proc is not None and self.proc.poll() is None:
            self._kill_group(signal.SIGKILL)
            try:
                self.proc.wait(scaled(10))
            except subprocess.TimeoutExpired:
                pass
        # Workers orphaned by an agentd killed earlier (in any incarnation) should have exited on their
        # own; tests assert that. Whatever is left goes now, so no test leaks processes into the next.
        for pgid in self._groups:
            self._kill_group(signal.SIGKILL, pgid)
        if KEEP:
            print(f"harness: kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self in _instances:
            _instances.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                if self.running():
                    self.stop()
            else:
                print(self.log_tail(), file=sys.stderr)
        finally:
            self.close()
        return False

    # -- files ---------------------------------------------------------------------------------------

    def write_config(self, text):
        """Write DIR/agentd.ini; agentd is given --config with it from the next start."""
        self.config_path = write_config(self.dir, text)
        return self.config_path

    def script(self, name, body):
        """Write an executable Python 3 script into DIR/scripts (see write_script) and return its path."""
        return write_script(os.path.join(self.dir, "scripts"), name, body)

    def gated_model(self, name="gated", gate="go"):
        """Configure (write_config) a model NAME that waits for the file DIR/GATE before answering "done";
        returns the gate's path. The caller creates the file to let every call through."""
        path = os.path.join(self.dir, gate)
        model = self.script(name + ".py", f"""
            import json, os, sys, time
            json.load(sys.stdin)
            while not os.path.exists({path!r}):
                time.sleep(0.02)
            print(json.dumps({{"text": "done"}}))
            """)
        self.write_config(f"[model.{name}]\ncommand = python3 {model}\n")
        return path

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines=40):
        tail = self.log().splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path}:\n" + "\n".join(tail)

    # -- the control socket --------------------------------------------------------------------------

    def conn(self, timeout=10):
        """A persistent connection (Client)."""
        return Client(self.socket, timeout)

    def request(self, obj, timeout=10):
        """One request on a fresh connection; the reply as a dict."""
        with Client(self.socket, timeout) as c:
            return c.request(obj)

    def ok(self, obj, timeout=10):
        """request(), asserting the reply is ok:true."""
        r = self.request(obj, timeout)
        assert r.get("ok") is True, f"request {obj} failed: {r}"
        return r

    def create(self, model="echo", **fields):
        """Create a conversation (settings.model = model; other keyword arguments are request fields,
        e.g. conversation="c1", settings={...} to give the settings whole). Returns its id."""
        req = {"op": "create", "settings": {"model": model}}
        req.update(fields)
        return self.ok(req)["conversation"]

    def send(self, conv, content, **fields):
        """Send a user message; returns its seq."""
        return self.ok({"op": "send", "conversation": conv, "content": content, **fields})["seq"]

    def events(self, conv, **fields):
        """The conversation's events (list of dicts); fields as in the events op (after=, limit=, ...)."""
        return self.ok({"op": "events", "conversation": conv, **fields})["events"]

    def watch(self, conv, after=None, timeout=10):
        """Open a connection, start a watch (after=None: only new events) and assert the reply is ok.
        Returns the Client: its recv() gives the streamed {"event": ...} and {"delta": ...} lines."""
        c = Client(self.socket, timeout)
        req = {"op": "watch", "conversation": conv, "id": "harness-watch"}
        if after is not None:
            req["after"] = after
        r = c.request(req)
        if r.get("ok") is not True:
            c.close()
            raise AssertionError(f"watch {conv} failed: {r}")
        return c

    def worker_pid(self, conv):
        """The pid of the conversation's live worker according to `get`, or None."""
        w = self.ok({"op": "get", "conversation": conv})["conversation"].get("worker")
        return w["pid"] if w else None

    def ctl(self, *args, check=True, input=None, timeout=30, env=None):
        """Run the real agentctl as `agentctl -s SOCKET ARGS...`; returns (rc, stdout, stderr) as text.
        check=True asserts rc == 0. input is text for its stdin."""
        if not os.access(AGENTCTL_BIN, os.X_OK):
            raise AssertionError(f"no agentctl binary at {AGENTCTL_BIN}: build it, or set AGENTCTL_BIN / AGENTD_BUILD_DIR")
        cmd = [AGENTCTL_BIN, "-s", self.socket] + [str(a) for a in args]
        try:
            p = subprocess.run(cmd, input=input, capture_output=True, encoding="utf-8", errors="replace",
                               timeout=scaled(timeout), env=self.env if env is None else env)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{' '.join(cmd)} did not finish within {scaled(timeout):g}s") from None
        # Checked whatever `check` says: ASan exits 1 by default, which would pass for an error reply.
        reports = sanitizer_reports(p.stderr)
        assert not reports, f"sanitizer report from {' '.join(cmd)}:\n{p.stderr}"
        if check:
            assert p.returncode == 0, (
                f"{' '.join(cmd)} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
        return p.returncode, p.stdout, p.stderr

    # -- processes -----------------------------------------------------------------------------------

    def children(self):
        """Pids of agentd's direct children (any state), sorted, from the ppid in /proc/*/stat."""
        if self.proc is None:
            return []
        me = self.pid
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            st = proc_stat(int(name))
            if st is not None and st[1] == me:
                out.append(int(name))
        return sorted(out)

    def zombies(self):
        """agentd's children that exited and are not reaped yet. One can exist for an instant between a
        worker's exit and agentd's SIGCHLD handling: assert with wait_for(lambda: not a.zombies(), ...)."""
        return [p for p in self.children() if (proc_stat(p) or ("?",))[0] == "Z"]


# ----------------------------------------------------------------------------------------------------
# Cleanup and a minimal runner


def _excepthook(tp, value, tb):
    global _failed
    _failed = True
    _prev_excepthook(tp, value, tb)


_prev_excepthook = sys.excepthook
sys.excepthook = _excepthook


@atexit.register
def _cleanup():
    for a in list(_instances):
        if _failed and a.proc is not None:
            print(a.log_tail(), file=sys.stderr)
        a.close()
    _pg_stop()



def call_tool(a, c, tool, args=None, timeout=30):
    """Ask the echo model of conversation c for one call of tool with args; returns the content of the
    tool_result event it leads to."""
    before = len(a.events(c, type="tool_result"))
    a.send(c, "/tool %s %s" % (tool, json.dumps(args or {})))
    res = wait_for(lambda: a.events(c, type="tool_result")[before:], timeout, f"the {tool} result")
    return res[0]["content"]


def config_refused(text, msg):
    """agentd given the configuration text exits 2 at start, its log saying msg."""
    b = Agentd(start=False)
    try:
        b.write_config(text)
        assert b.expect_exit() == 2, text
        assert msg in b.log(), (text, b.log())
    finally:
        b.close()


def config_starts(text):
    """agentd given the configuration text starts and answers a ping."""
    b = Agentd(start=False)
    try:
        b.write_config(text)
        b.start()
        assert b.ok({"op": "ping"})
    finally:
        b.close()

def main(namespace, names=None):
    """Run the test_* functions of `namespace` (pass globals()) in definition order, or those named on
    the command line, each independently; report each, print tracebacks and agentd log tails for
    failures, and exit 0 only if all passed (and there was at least one). A test whose agentd logged a
    sanitizer report fails. Any Agentd a test leaves open is closed after it."""
    global _failed
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    wanted = names if names is not None else sys.argv[1:]
    if wanted:
        unknown = set(wanted) - {n for n, _ in tests}
        if unknown:
            raise SystemExit(f"unknown tests: {', '.join(sorted(unknown))}")
        tests = [(n, f) for n, f in tests if n in wanted]
    failed = []
    if PG:
        for name, fn in tests:
            if getattr(fn, "lmdb_only", None):
                print(f"n/a  {name} (on PostgreSQL: {fn.lmdb_only})", flush=True)
        tests = [(n, f) for n, f in tests if not getattr(f, "lmdb_only", None)]
    for name, fn in tests:
        t0 = time.monotonic()
        before = set(_instances)
        try:
            fn()
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            failed.append(name)
            print(f"FAIL {name} ({time.monotonic() - t0:.2f}s)", flush=True)
            traceback.print_exc()
            for a in [a for a in _instances if a not in before]:
                if a.proc is not None:
                    print(a.log_tail(), file=sys.stderr)
        else:
            try:
                for a in [a for a in _instances if a not in before]:
                    a.check_sanitizers()
            except AssertionError:
                failed.append(name)
                print(f"FAIL {name} ({time.monotonic() - t0:.2f}s)", flush=True)
                traceback.print_exc()
            else:
                print(f"ok   {name} ({time.monotonic() - t0:.2f}s)", flush=True)
        finally:
            for a in [a for a in _instances if a not in before]:
                a.close()
    print(f"{len(tests) - len(failed)} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    sys.stdout.flush()
    sys.exit(1 if failed or not tests else 0)
