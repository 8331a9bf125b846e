"""Who may make agentd do what (docs/operations.md, docs/protocol.md): the data directory, the configuration copy
workers run from, the socket's mode and peer check, the socket file at exit, and log lines no text can forge.
Some tests act as another user (uid 65534, with setpriv) and are skipped when not run as root."""
import os
import shutil
import stat
import subprocess
import sys

import harness
from harness import Agentd, wait_for

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ROOT = os.geteuid() == 0


def mode(p):
    return stat.S_IMODE(os.lstat(p).st_mode)


def as_nobody_ping(sock, who=NOBODY):
    """What uid 65534 gets for a ping on sock: the reply, or the connect error's errno."""
    # agentd may refuse (write its line and close) before the ping is sent: the send then fails with
    # EPIPE, and the refusal is still there to read, as agentctl does
    code = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(%r)\nexcept OSError as e:\n"
            "    print('errno', e.errno); sys.exit(0)\ntry:\n    s.sendall(b'{\"op\":\"ping\"}\\n')\n"
            "except OSError:\n    pass\ns.settimeout(5)\nprint(s.recv(999).decode())\n") % sock
    r = subprocess.run(who + [sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    return r.stdout.strip()


def traversable(a):
    os.chmod(a.dir, 0o755)
    os.chmod(a.data_dir, 0o755)  # the socket's directory
    for sub in ("scripts",):
        p = os.path.join(a.dir, sub)
        if os.path.isdir(p):
            os.chmod(p, 0o755)


def test_a_data_directory_others_may_write_or_own_is_refused():
    # Whoever can write the data directory can rewrite the configuration copy workers run from: with an
    # existing 0777 (or 0770, or foreign-owned) directory agentd started without a word, and another user
    # made it run their command.
    for m, said in ((0o777, "is writable by everyone (mode 0777): refusing it (chmod 700 "),
                    (0o770, "is writable by its group (mode 0770): refusing it")):
        with Agentd(start=False) as a:
            os.makedirs(a.data_dir, exist_ok=True)
            os.chmod(a.data_dir, m)
            r = harness.run_agentd("--data", a.data_dir, "--socket", a.socket, capture_output=True, text=True,
                                   timeout=harness.scaled(10))
            assert r.returncode == 1 and f"the data directory {a.data_dir} {said}" in r.stderr, r
            assert os.listdir(a.data_dir) == [], os.listdir(a.data_dir)  # nothing written into it
    if ROOT:
        with Agentd(start=False) as a:
            os.makedirs(a.data_dir, exist_ok=True)
            os.chown(a.data_dir, 65534, 65534)
            r = harness.run_agentd("--data", a.data_dir, "--socket", a.socket, capture_output=True, text=True,
                                   timeout=harness.scaled(10))
            assert r.returncode == 1 and "belongs to uid 65534, not to agentd's 0: refusing it" in r.stderr, r
    # readable by others is fine: the files in it are 0600
    with Agentd(start=False) as a:
        os.makedirs(a.data_dir, exist_ok=True)
        os.chmod(a.data_dir, 0o755)
        a.start()
        assert a.ok({"op": "ping"})


def test_a_data_directory_that_is_a_dangling_link_is_named():
    # The owner and mode checks read a struct stat that a failed stat() had left uninitialised.
    with Agentd(start=False) as a:
        link = os.path.join(a.dir, "data-link")
        os.symlink(os.path.join(a.dir, "nowhere", "data"), link)
        r = harness.run_agentd("--data", link, "--socket", a.socket, capture_output=True, text=True,
                               timeout=harness.scaled(10))
        assert r.returncode == 1 and f"data directory {link}: No such file or directory" in r.stderr, r


def test_the_configuration_copy_is_the_owners_alone():
    # agentd.ini.running (what workers run from; it may hold credentials) followed the umask: 0644 under
    # 022, 0666 under 000, readable and writable by others.
    for m in (0o000, 0o022):
        with Agentd(start=False, config="[agentd]\nidle_timeout = 5m\n") as a:
            a.launcher = [a.script("umask.py", f"""
                import os, sys
                os.umask(0o{m:o})
                os.execvp(sys.argv[1], sys.argv[1:])
                """)]
            a.start()
            run = os.path.join(a.data_dir, "agentd.ini.running")
            assert mode(run) == 0o600, (oct(m), oct(mode(run)))
            for f in ("agentd.pid",) + (() if harness.PG else ("data.mdb", "lock.mdb", "flush.lock")):
                assert mode(os.path.join(a.data_dir, f)) == 0o600, (f, oct(mode(os.path.join(a.data_dir, f))))
            assert mode(a.data_dir) == 0o700 and mode(a.socket) == 0o600


def test_the_socket_lets_other_uids_in_only_when_configured():
    if not ROOT or not shutil.which("setpriv"):
        print("SKIP test_the_socket_lets_other_uids_in_only_when_configured: needs root and setpriv")
        return
    with Agentd(start=False) as a:
        traversable(a)
        a.start()
        assert as_nobody_ping(a.socket) == "errno 13"  # 0600: not even a connect
        os.chmod(a.socket, 0o666)  # an operator's chmod: the peer check still refuses
        out = as_nobody_ping(a.socket)
        assert '"unavailable"' in out and "pong" not in out, out
        assert "refused a client of uid 65534" in a.log(), a.log()
        text = a.ok({"op": "metrics"})["text"]
        assert 'agentd_errors_total{code="unavailable"} 1\n' in text, text  # the refusal is counted
    # allow_any_uid = on: the socket was still 0600, so the setting did nothing on its own
    with Agentd(start=False, config="[agentd]\nallow_any_uid = on\n") as a:
        traversable(a)
        a.start()
        assert mode(a.socket) == 0o666, oct(mode(a.socket))
        out = as_nobody_ping(a.socket)
        assert '"ok":true' in out, out


def a_group():
    """(name, gid) of a group of /etc/group that is neither root's nor nobody's."""
    import grp
    return next((g.gr_name, g.gr_gid) for g in grp.getgrall() if g.gr_gid not in (0, 65534, os.getgid()))


def test_socket_group_lets_its_members_in():
    harness.config_refused("[agentd]\nsocket_group = no-such-group-here\n",
                           "socket_group: no group named 'no-such-group-here' in /etc/group")
    if not ROOT or not shutil.which("setpriv"):
        print("SKIP test_socket_group_lets_its_members_in: needs root and setpriv")
        return
    name, gid = a_group()
    with Agentd(start=False, config=f"[agentd]\nsocket_group = {name}\n") as a:
        traversable(a)
        a.start()
        st = os.lstat(a.socket)
        assert mode(a.socket) == 0o660 and st.st_gid == gid, (oct(mode(a.socket)), st.st_gid, gid)
        assert as_nobody_ping(a.socket) == "errno 13"  # not a member: not even a connect
        member = ["setpriv", "--reuid=65534", "--regid=65534", f"--groups={gid}"]
        out = as_nobody_ping(a.socket, member)  # a supplementary group (SO_PEERGROUPS)
        assert '"ok":true' in out, out
        primary = ["setpriv", "--reuid=65534", f"--regid={gid}", "--clear-groups"]
        out = as_nobody_ping(a.socket, primary)
        assert '"ok":true' in out, out
        # A member of the file's group who is not one for the peer check is still refused: the mode is
        # not the check (chmod 0666 by hand).
        os.chmod(a.socket, 0o666)
        out = as_nobody_ping(a.socket)
        assert '"unavailable"' in out and "socket_group" in out, out


def test_at_exit_only_its_own_socket_file_is_removed():
    # agentd A's socket file is removed and agentd B, on another data directory, binds the same path: when A
    # stopped, it unlinked B's live socket.
    with Agentd() as a:
        os.unlink(a.socket)
        with Agentd(start=False) as b:
            b.socket = a.socket
            b.start()
            a.stop()
            assert stat.S_ISSOCK(os.lstat(b.socket).st_mode), "A removed B's socket"
            assert b.ok({"op": "ping"})
            b.stop()
            assert not os.path.exists(b.socket)  # B's own, removed


FORGER = r'''
import sys
sys.stderr.write("upstream said: err x\n2026-01-01T00:00:00.000Z agentd[1] error: FORGED\x1b[2J")
sys.exit(1)
'''


def test_no_text_from_outside_forges_a_log_line():
    # A model's stderr quoted in a log line went out raw: its newline made a second line that looked like
    # agentd's own ("one line per event", operations.md).
    with Agentd(start=False) as a:
        forger = a.script("forger.py", FORGER)
        a.write_config(f"[model.m]\ncommand = {forger}\nretries = 0\n")
        a.start()
        c = a.create(settings={"model": "m"})
        a.send(c, "hi")
        wait_for(lambda: any(e["type"] == "error" for e in a.events(c)), 10, "the model's error")
        wait_for(lambda: "FORGED" in a.log(), 10, "the failure logged")
        lines = [ln for ln in a.log().splitlines() if "FORGED" in ln]
        assert len(lines) == 1 and "agentd-worker[" in lines[0], lines
        assert "err x\\n2026-01-01T00:00:00.000Z agentd[1] error: FORGED\\x1b[2J" in lines[0], lines
        assert not any(ln.startswith("2026-01-01") for ln in a.log().splitlines())


harness.main(globals())
