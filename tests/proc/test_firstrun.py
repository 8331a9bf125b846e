"""A new user's first hour (issue 21, "First run and agentctl, tried as a new user would"): the README's
examples run literally; scripts/run.sh shows its build and scripts/test.sh the time of each stage; agentctl
finds the socket as operators expect and names every path it tried; pending, approve, deny and -q; a
mistyped command gets "did you mean"; deadlines show their UTC time; a missing configuration file is named
as the configuration; the start-up log names the configuration; a failed start leaves no data directory;
watch and a timed-out events --wait end with a word."""
import json
import os
import re
import signal
import socket
import select
import subprocess
import tempfile
import time

import harness
from harness import AGENTCTL_BIN, Agentd, REPO, run_agentd, scaled, wait_for

BUILD = os.path.dirname(harness.AGENTD_BIN)
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
TOOLS = """
[tool.approve]
executor = human
prompt = Pay?
expires = 1h
"""


def agentctl(*args, env=None, cwd=None, timeout=30):
    """agentctl without the harness's -s: (rc, stdout, stderr)."""
    e = dict(os.environ if env is None else env)
    p = subprocess.run([AGENTCTL_BIN] + [str(x) for x in args], capture_output=True, encoding="utf-8",
                       errors="replace", env=e, cwd=cwd, timeout=scaled(timeout))
    assert not harness.sanitizer_reports(p.stderr), p.stderr
    return p.returncode, p.stdout, p.stderr


def no_socket_env(**extra):
    env = dict(os.environ)
    env.pop("AGENTD_SOCKET", None)
    env.update(extra)
    return env


def readme_blocks():
    text = open(REPO / "README.md").read()
    return re.findall(r"```(\w+)\n(.*?)```", text, re.S), text


def test_readme_examples_work_literally():
    blocks, text = readme_blocks()
    # The start line's alternative form (scripts/run.sh builds in the repository, which a test must not).
    start = re.search(r"# or: (build/agentd [^\n]*--config agentd\.ini)", text)
    assert start, "README: the start line names build/agentd ... --config agentd.ini"
    ini = [b for lang, b in blocks if lang == "ini"]
    shells = [b for lang, b in blocks if lang == "sh" and "$agentctl" in b]
    assert len(ini) == 1 and len(shells) == 2, blocks
    # Where to save the file, and how to start agentd with it, are said in so many words.
    assert "save this as `agentd.ini`" in text and "scripts/run.sh --config agentd.ini" in text
    d = tempfile.mkdtemp(prefix="agentd-readme-", dir="/tmp")
    os.symlink(BUILD, os.path.join(d, "build"))
    with open(os.path.join(d, "agentd.ini"), "w") as f:
        f.write(ini[0])
    log = open(os.path.join(d, "agentd.log"), "wb")
    p = subprocess.Popen(start.group(1).split(), cwd=d, stdout=log, stderr=log, start_new_session=True)
    try:
        sock = os.path.join(d, "agentd-data", "agentd.sock")
        wait_for(lambda: agentctl("-s", sock, "ping")[0] == 0, 10, "agentd from the README")
        env = no_socket_env()

        def sh(block):
            # The block as written, in the directory it is written for; a job it leaves (watch &) is ended.
            r = subprocess.run(["bash", "-c", "agentctl=build/agentctl\n" + block + "\nkill $! 2>/dev/null; true"],
                               cwd=d, env=env, capture_output=True, text=True, timeout=scaled(30))
            assert r.returncode == 0 and "agentctl:" not in r.stderr, (block, r)
            return r.stdout

        out = sh(shells[0].replace("agentctl=build/agentctl\n", ""))
        assert '2 assistant_msg {"text":"echo: hello","context_seq":1}' in out, out
        out = sh(shells[1])
        assert re.search(r"^ID +CONVERSATION +KIND +NAME +DEADLINE +PROMPT +ARGS +ARGS_DIGEST +APPROVALS$", out, re.M), out
        assert re.search(r"^4 suspension ", out, re.M), out
        assert re.search(r"^seq: +5$", out, re.M), out
        assert re.search(r'^6 assistant_msg \{"text":"tc-\w+ resolved: \{\\"approved\\":true', out, re.M), out
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(scaled(20))
        log.close()
        if os.environ.get("AGENTD_KEEP"):
            print("kept", d)
        else:
            subprocess.run(["rm", "-rf", d])


def build_type(build_dir):
    cache = open(os.path.join(build_dir, "CMakeCache.txt")).read()
    return re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", cache, re.M).group(1)


def test_run_sh_shows_the_build():
    env = dict(os.environ, AGENTD_BUILD_DIR=BUILD)
    before = build_type(BUILD)
    p = subprocess.run([str(REPO / "scripts/run.sh"), "--version"], capture_output=True, text=True, env=env,
                       timeout=scaled(300))
    # The build directory keeps the type it was configured with: run.sh rebuilding the suite's own build
    # as another type would swap the binaries under the tests running beside it.
    assert build_type(BUILD) == before, (before, build_type(BUILD))
    assert p.returncode == 0 and re.fullmatch(r"agentd \S+\n", p.stdout), p
    assert f"run.sh: configuring and building in {BUILD}/" in p.stderr, p.stderr
    # make's progress (or ninja's): the build is not silent.
    assert "Built target agentd" in p.stderr or "ninja" in p.stderr, p.stderr
    assert f"run.sh: starting {BUILD}/agentd --version" in p.stderr, p.stderr


def test_test_sh_says_what_it_runs_and_how_long():
    p = subprocess.run(["bash", str(REPO / "scripts/test.sh"), "--dry-run"], capture_output=True, text=True,
                       timeout=scaled(30))
    assert p.returncode == 0 and p.stdout == "dry run: nothing was run\n", p
    stages = re.findall(r"^test\.sh: == (.+?): (?!done in)(.+)$", p.stderr, re.M)
    names = [n for n, _ in stages]
    assert names[:4] == ["build (normal)", "Check suites and process tests", "process tests on PostgreSQL",
                         "process tests under valgrind"], names
    assert any("ASan" in n for n in names) and any(n.startswith("fuzzing") for n in names), names
    for n in names:
        assert f"test.sh: == {n}: done in 0m" in p.stderr, (n, p.stderr)
        assert re.search(rf"^  {re.escape(n)} +\d+m\d\ds$", p.stderr, re.M), (n, p.stderr)
    # docs/testing.md has a row for each of these stages, with its time.
    doc = open(REPO / "docs/testing.md").read().split("## Time")[1].split("\n## ")[0]
    for n in names:
        assert re.search(rf"^\| {re.escape(n.split(' (')[0])}[^|]* \| [^|]+ \| [^|]*\w[^|]* \|$", doc, re.M), (n, doc)


def test_test_sh_fails_on_what_the_tests_left_behind():
    # test.sh's last stage, run on a directory of this test's own: what is older than the run's marker, or
    # not named as the tests name their files, passes; an agentd-* entry or a vgdb FIFO made after it fails
    # the stage, named; a missing directory (no /dev/shm) is passed over.
    fn = re.search(r"^left_behind\(\) \{.*?^\}$", open(REPO / "scripts/test.sh").read(), re.M | re.S).group(0)
    with tempfile.TemporaryDirectory() as d:
        tmp, marker = os.path.join(d, "tmp"), os.path.join(d, "marker")
        os.mkdir(tmp)
        os.mkdir(os.path.join(tmp, "agentd-older"))
        open(marker, "w").close()
        later = time.time() + 5
        os.mkdir(os.path.join(tmp, "someone-elses"))

        def census():
            for n in os.listdir(tmp):
                if n != "agentd-older":
                    os.utime(os.path.join(tmp, n), (later, later))
            return subprocess.run(["bash", "-c", "set -euo pipefail\n" + fn + '\nleft_behind "$@"', "census", marker,
                                   tmp, os.path.join(d, "missing")], capture_output=True, text=True, timeout=scaled(10))

        p = census()
        assert p.returncode == 0 and p.stderr == "", p
        os.mkdir(os.path.join(tmp, "agentd-test-x"))
        os.mkfifo(os.path.join(tmp, "vgdb-pipe-from-vgdb-to-1"))
        p = census()
        assert p.returncode == 1, p
        assert "the tests left these behind" in p.stderr and "agentd-test-x" in p.stderr, p.stderr
        assert "vgdb-pipe-from-vgdb-to-1" in p.stderr and "older" not in p.stderr and "someone" not in p.stderr, p.stderr


def test_agentctl_finds_the_socket_and_names_every_path_tried():
    a = Agentd(start=False)
    os.makedirs(os.path.join(a.dir, "agentd-data"))
    a.socket = os.path.join(a.dir, "agentd-data", "agentd.sock")
    a.start()
    env = no_socket_env()
    # Where scripts/run.sh's agentd listens, seen from its directory.
    rc, out, err = agentctl("ping", env=env, cwd=a.dir)
    assert rc == 0 and out.startswith("pong"), (rc, out, err)
    # From elsewhere: both defaults tried, both named with why.
    rc, out, err = agentctl("ping", env=env, cwd="/")
    run_sock = "/run/agentd/agentd.sock"
    if not os.path.exists(run_sock):
        assert rc == 2 and out == "", (rc, out)
        assert err == (f"agentctl: cannot connect to agentd: tried ./agentd-data/agentd.sock (No such file or "
                       f"directory) and {run_sock} (No such file or directory); is agentd running? Give its "
                       "socket with -s SOCKET or $AGENTD_SOCKET\n"), err
    # $AGENTD_SOCKET from anywhere; -s over it.
    assert agentctl("ping", env=no_socket_env(AGENTD_SOCKET=a.socket), cwd="/")[0] == 0
    rc, _, err = agentctl("-s", "/nonexistent/x.sock", "ping", env=no_socket_env(AGENTD_SOCKET=a.socket))
    assert rc == 2 and "/nonexistent/x.sock" in err and "(is agentd running?)" in err, err
    # A dead agentd's socket file in ./agentd-data is passed over, and named with its error.
    a.kill(signal.SIGKILL)
    assert os.path.exists(a.socket)
    rc, _, err = agentctl("ping", env=env, cwd=a.dir)
    if not os.path.exists(run_sock):
        assert rc == 2 and "tried ./agentd-data/agentd.sock (Connection refused) and " in err, err
    # The help says the order.
    help_text = agentctl("--help")[1]
    assert "else $AGENTD_SOCKET, else ./agentd-data/agentd.sock if it exists, else\n/run/agentd/agentd.sock" in help_text


def test_pending_approve_deny_and_ids_only():
    with Agentd(config=TOOLS) as a:
        rc, out, _ = a.ctl("pending")
        assert out == "no pending approvals or unknown calls\n", out
        assert a.ctl("-q", "pending")[1] == ""
        a.create(conversation="plain")
        c1 = a.ctl("create", "--id", "c1", "--model", "echo", "--tool", "approve")[1].strip()
        c2 = a.ctl("-q", "create", "--model", "echo", "--tool", "approve")[1].strip()
        assert c1 == "c1" and re.fullmatch(r"[\w.:-]+", c2), c2
        assert a.ctl("-q", "send", c1, '/tool approve {"amount": 5}')[1] == "1\n"
        a.send(c2, '/tool approve {"amount": 7}')
        a.send("plain", "hi")
        wait_for(lambda: len(a.ctl("-q", "pending")[1].split()) == 2, 10, "two pending approvals")
        rc, out, _ = a.ctl("pending")
        lines = out.splitlines()
        assert re.fullmatch(r"ID +CONVERSATION +KIND +NAME +DEADLINE +PROMPT +ARGS +ARGS_DIGEST +APPROVALS", lines[0]), out
        rows = {ln.split()[1]: ln.split() for ln in lines[1:]}
        assert set(rows) == {c1, c2}, out
        assert rows[c1][2] == "approval" and rows[c1][3] == "approve", out
        assert re.fullmatch(ISO, rows[c1][4]) and rows[c1][5] == "Pay?", out
        assert rows[c1][6] == '{"amount":5}', out
        ids = a.ctl("-q", "pending")[1].split()
        assert sorted(ids) == sorted(r[0] for r in rows.values())
        # --json: one line agentctl assembled, the rows as tool_calls gives them.
        j = json.loads(a.ctl("--json", "pending")[1])
        assert j["ok"] is True and sorted(t["id"] for t in j["tool_calls"]) == sorted(ids), j
        assert all(t["status"] == "pending" and t["kind"] == "approval" and t["deadline"] > 0 for t in j["tool_calls"]), j
        # The deadline, raw milliseconds in the reply, shows its UTC time too.
        t1 = rows[c1][0]
        out = a.ctl("tool-call", t1)[1]
        assert re.search(rf"^deadline: +\d+ \({ISO}\)$", out, re.M), out
        # approve, with a comment; deny, without.
        rc, out, _ = a.ctl("approve", t1, "--comment", "within budget")
        assert re.search(r"^seq: +\d+$", out, re.M), out
        tc = a.ok({"op": "tool_call", "tool_call_id": t1})["tool_call"]
        assert tc["status"] == "resolved" and tc["result"] == {"approved": True, "comment": "within budget"}, tc
        t2 = rows[c2][0]
        assert re.fullmatch(r"\d+\n", a.ctl("-q", "deny", t2)[1])
        tc = a.ok({"op": "tool_call", "tool_call_id": t2})["tool_call"]
        assert tc["status"] == "resolved" and tc["result"] == {"approved": False}, tc
        # A second answer is stale; nothing changes.
        rc, out, err = a.ctl("approve", t2, check=False)
        assert rc == 1 and err.startswith("agentctl: stale: "), (rc, err)
        assert a.ok({"op": "tool_call", "tool_call_id": t2})["tool_call"]["result"] == {"approved": False}
        assert a.ctl("pending")[1] == "no pending approvals or unknown calls\n"
        # The echo model's next turn sees the decision.
        wait_for(lambda: "approved" in json.dumps(a.events(c2)[-1]["content"]) and
                 a.events(c2)[-1]["type"] == "assistant_msg", 10, "the answer after the denial")
        # -q elsewhere: ids one a line; commands without ids print nothing.
        assert sorted(a.ctl("-q", "list")[1].split()) == sorted([c1, c2, "plain"])
        assert a.ctl("-q", "tool-calls", c1)[1] == t1 + "\n"
        assert a.ctl("-q", "ping")[1] == ""
        assert a.ctl("-q", "events", c1, "--limit", "2")[1].split() == [str(s) for s in
                                                                         [e["seq"] for e in a.events(c1)][-2:]]
        # Usage errors: no id, an unknown option.
        rc, _, err = a.ctl("approve", check=False)
        assert rc == 2 and "missing TOOL_CALL_ID" in err, err
        rc, _, err = a.ctl("deny", t1, "--result", "1", check=False)
        assert rc == 2 and "unknown option '--result'" in err, err
        rc, _, err = a.ctl("pending", "extra", check=False)
        assert rc == 2 and "unexpected argument 'extra'" in err, err


def test_a_mistyped_command_gets_did_you_mean():
    for typed, meant in [("tool-clals", "tool-calls"), ("lst", "list"), ("pend", "pending"),
                         ("aprove", "approve"), ("stauts", "status")]:
        rc, out, err = agentctl(typed, "x")
        assert rc == 2 and out == "", (typed, rc, out)
        assert err.startswith(f"agentctl: unknown command '{typed}'; did you mean '{meant}'?\n"), (typed, err)
    rc, _, err = agentctl("frobnicate")
    assert rc == 2 and err.startswith("agentctl: unknown command 'frobnicate'\n"), err
    rc, _, err = agentctl("help", "evnts")
    assert rc == 2 and "did you mean 'events'?" in err, err


def test_configuration_named_in_errors_and_in_the_start_up_log():
    d = tempfile.mkdtemp(prefix="agentd-cfg-", dir="/tmp")
    try:
        p = run_agentd("--data", f"{d}/data", "--config", f"{d}/agentd.ini", capture_output=True, text=True,
                       timeout=scaled(20))
        assert p.returncode == 2, p
        assert p.stderr == (f"agentd: cannot read the configuration file: {d}/agentd.ini: No such file or "
                            "directory\n"), p.stderr
        assert not os.path.exists(f"{d}/data"), "a configuration error created the data directory"
    finally:
        subprocess.run(["rm", "-rf", d])
    with Agentd(config=TOOLS) as a:
        assert f", config {os.path.realpath(a.config_path)}\n" in a.log(), a.log()
    with Agentd() as a:
        assert ", config none (built-in defaults)\n" in a.log(), a.log()


def test_a_failed_start_leaves_no_data_directory():
    with Agentd() as a:
        b = Agentd(data_dir=os.path.join(a.dir, "new-data"), start=False, extra_args=["--socket", a.socket])
        os.rmdir(b.data_dir)  # the harness makes it; agentd is to make it here
        assert b.expect_exit() == 1
        assert f"another process listens on {a.socket}" in b.log(), b.log()
        assert not os.path.exists(os.path.join(a.dir, "new-data")), os.listdir(a.dir)
        # A directory that was there before is left as it was, store files of this start removed or not.
        kept = os.path.join(a.dir, "kept")
        os.mkdir(kept, 0o700)
        with open(os.path.join(kept, "mine"), "w") as f:
            f.write("x")
        c = Agentd(data_dir=kept, start=False, extra_args=["--socket", a.socket])
        assert c.expect_exit() == 1
        assert os.path.exists(os.path.join(kept, "mine"))
        # agentd still serves.
        assert a.ok({"op": "ping"})["ok"] is True


def test_watch_and_a_timed_out_wait_end_with_a_word():
    with Agentd() as a:
        c = a.create()
        a.send(c, "hi")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        rc, out, err = a.ctl("events", c, "--after", "2", "--wait", "200")
        assert rc == 0 and out == "" and err == "agentctl: events: no event after seq 2 within 0.2 s\n", (rc, out, err)
        # Answered before the wait ends: no word.
        rc, out, err = a.ctl("events", c, "--after", "1", "--wait", "200")
        assert rc == 0 and out.startswith("2 assistant_msg") and err == "", (out, err)
        # From seq 1: the watch streams the reply, so the test knows agentd took the watch (its first reply
        # is sent once durable) before it stops agentd.
        p = subprocess.Popen([AGENTCTL_BIN, "-s", a.socket, "watch", c, "--after", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([p.stdout], [], [], scaled(10))
        assert ready, "the watch streamed nothing"
        first = p.stdout.readline()
        assert first.startswith("2 assistant_msg"), first
        a.stop()
        out, err = p.communicate(timeout=scaled(10))
        assert p.returncode == 0 and out == "", (p.returncode, out)
        assert err == "agentctl: watch: agentd ended the watch (it stopped, or the conversation was deleted)\n", err


harness.main(globals())
