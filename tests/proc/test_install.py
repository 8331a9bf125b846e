"""Packaging (docs/operations.md, "Installing"): `cmake --install` into a staging prefix puts every file where
it belongs with its mode; the systemd units pass `systemd-analyze verify`; every man page renders without a
warning; the staged agentd runs the staged worker with the echo model; `--version` and `--help` of every
program agree with the man pages; `cpack` builds a .deb holding the same files under /usr and /etc.

Needs cmake, man-db and groff-base, dpkg-dev (scripts/deps.sh); systemd-analyze (Debian `systemd`) is used
when present, and its step is skipped, saying so, when it is not."""
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile

import harness
from harness import Agentd, REPO, wait_for

BUILD = os.path.dirname(harness.AGENTD_BIN)
WEB = os.path.exists(os.path.join(BUILD, "agentd-web"))  # the page's target exists in this build

# Every file the install puts under the prefix, and its mode.
EXPECTED = {
    "bin/agentd": 0o755,
    "bin/agentd-worker": 0o755,
    "bin/agentd-model": 0o755,
    "bin/agentd-mcp-http": 0o755,
    "bin/agentd-sandbox": 0o755,
    "bin/agentctl": 0o755,
    "share/man/man8/agentd.8": 0o644,
    "share/man/man1/agentctl.1": 0o644,
    "share/man/man5/agentd.ini.5": 0o644,
    "share/bash-completion/completions/agentctl": 0o644,
    "share/doc/agentd/agentd.ini.sample": 0o644,
    "lib/sysusers.d/agentd.conf": 0o644,
    "lib/systemd/system/agentd.service": 0o644,
    "etc/agentd/agentd.ini": 0o644,
}
if WEB:
    EXPECTED.update({"bin/agentd-web": 0o755, "share/man/man8/agentd-web.8": 0o644,
                     "lib/systemd/system/agentd-web.service": 0o644})
PAGES = {"agentd": "share/man/man8/agentd.8", "agentctl": "share/man/man1/agentctl.1"}
if WEB:
    PAGES["agentd-web"] = "share/man/man8/agentd-web.8"
# agentd-worker-dynamic, the worker of PostgreSQL stores, exists where the worker is linked statically.
if os.path.exists(os.path.join(BUILD, "agentd-worker-dynamic")):
    EXPECTED["bin/agentd-worker-dynamic"] = 0o755

_stage = None


def stage():
    """One staged install for the whole file: cmake --install BUILD --prefix STAGE."""
    global _stage
    if _stage is None:
        d = tempfile.mkdtemp(prefix="agentd-stage-")
        p = subprocess.run(["cmake", "--install", BUILD, "--prefix", d], capture_output=True, text=True)
        assert p.returncode == 0, f"cmake --install failed:\n{p.stdout}\n{p.stderr}"
        _stage = d
    return _stage


def run(*cmd, env=None, check=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if check:
        assert p.returncode == 0, f"{' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def test_every_file_in_its_place_with_its_mode():
    s = stage()
    found = {}
    for root, dirs, files in os.walk(s):
        for d in dirs:
            mode = stat.S_IMODE(os.stat(os.path.join(root, d)).st_mode)
            assert mode == 0o755, f"directory {os.path.relpath(os.path.join(root, d), s)} is {mode:o}"
        for f in files:
            path = os.path.join(root, f)
            found[os.path.relpath(path, s)] = stat.S_IMODE(os.lstat(path).st_mode)
    assert found == EXPECTED, f"installed {sorted(found.items())}\nexpected {sorted(EXPECTED.items())}"
    # The sample is the live configuration's first version, and it loads (agentd refuses a bad one).
    with open(f"{s}/etc/agentd/agentd.ini") as a, open(REPO / "packaging/agentd.ini.sample") as b:
        assert a.read() == b.read()
    # The unit names the staged programs and configuration: what it runs exists.
    unit = open(f"{s}/lib/systemd/system/agentd.service").read()
    assert f"ExecStart={s}/bin/agentd --data /var/lib/agentd --socket /run/agentd/agentd.sock " \
           f"--config {s}/etc/agentd/agentd.ini\n" in unit, unit
    for key in ("Type=notify", "NotifyAccess=main", "WatchdogSec=", "User=agentd", "ProtectSystem=strict",
                "ProtectHome=yes", "NoNewPrivileges=yes", "PrivateTmp=yes", "StateDirectory=agentd",
                "RuntimeDirectory=agentd"):
        assert f"\n{key}" in unit, key
    users = [ln for ln in open(f"{s}/lib/sysusers.d/agentd.conf").read().splitlines() if not ln.startswith("#")]
    assert users == ['u agentd - "agentd supervisor" /var/lib/agentd',
                     'u agentd-web - "agentd-web approvals page" /var/lib/agentd-web', "m agentd-web agentd"], users
    # systemd-sysusers makes them so: agentd-web a member of group agentd.
    if shutil.which("systemd-sysusers"):
        root = os.path.join(s, "sysroot")
        os.makedirs(f"{root}/etc", exist_ok=True)
        run("systemd-sysusers", f"--root={root}", f"{s}/lib/sysusers.d/agentd.conf")
        groups = {ln.split(":")[0]: ln.strip().split(":")[3] for ln in open(f"{root}/etc/group")}
        assert groups.get("agentd") == "agentd-web" and "agentd-web" in groups, groups
        shutil.rmtree(root)
    # The page runs as its own user in agentd's group, and agentd lets that group in.
    web = open(f"{s}/lib/systemd/system/agentd-web.service").read()
    for key in ("User=agentd-web", "Group=agentd-web", "SupplementaryGroups=agentd"):
        assert f"\n{key}\n" in web, key
    assert "\nsocket_group = agentd\n" in open(f"{s}/etc/agentd/agentd.ini").read()
    # The completion is bash that defines its function.
    run("bash", "-c", f"source {s}/share/bash-completion/completions/agentctl && complete -p agentctl")
    # A second install keeps an edited configuration.
    with open(f"{s}/etc/agentd/agentd.ini", "a") as f:
        f.write("; edited\n")
    run("cmake", "--install", BUILD, "--prefix", s)
    assert open(f"{s}/etc/agentd/agentd.ini").read().endswith("; edited\n")


def test_units_verify():
    s = stage()
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        print("SKIP systemd-analyze verify: no systemd-analyze here (Debian package `systemd`)")
        return
    env = dict(os.environ, MANPATH=f"{s}/share/man", SYSTEMD_LOG_COLOR="0")
    # Together: agentd-web.service wants agentd.service, which verify finds among the files given.
    units = [f"{s}/{u}" for u in sorted(EXPECTED) if u.endswith(".service")]
    p = run(analyze, "verify", *units, env=env, check=False)
    # verify resolves Documentation=man:... against the staged pages and ExecStart against the staged
    # programs; a warning (an unknown key, a bad value) is printed without changing the status.
    assert p.returncode == 0 and p.stdout + p.stderr == "", f"{units}:\n{p.stdout}{p.stderr}"
    # It does catch a bad unit: the check can fail.
    bad = os.path.join(s, "bad.service")
    with open(bad, "w") as f:
        f.write(open(f"{s}/lib/systemd/system/agentd.service").read().replace("ProtectHome=yes",
                                                                              "ProtectHome=sometimes"))
    p = run(analyze, "verify", bad, env=env, check=False)
    os.unlink(bad)
    assert "sometimes" in p.stderr, p


def test_the_page_is_not_bound_to_agentd():
    """agentd-web.service wants agentd.service, ordered after it, but is not stopped or restarted with it
    (Requires= would sign every approver out at each `systemctl restart agentd`)."""
    if not WEB:
        return
    unit = open(f"{stage()}/lib/systemd/system/agentd-web.service").read()
    deps = re.findall(r"^(Requires|Wants|BindsTo|PartOf|After)=(.*)$", unit, re.M)
    assert sorted(deps) == [("After", "agentd.service"), ("Wants", "agentd.service")], deps


def test_man_pages_render_without_warnings():
    s = stage()
    env = dict(os.environ, MANWIDTH="80")
    for page in sorted(f for f in EXPECTED if f.startswith("share/man/")):
        p = run("man", "--warnings", "-l", f"{s}/{page}", env=env)
        assert p.stderr == "", f"{page}:\n{p.stderr}"
        assert len(p.stdout.splitlines()) > 20, p.stdout  # it rendered
    # The check sees warnings: a page with an unknown macro is reported.
    with tempfile.NamedTemporaryFile("w", suffix=".1") as f:
        f.write(".TH X 1\n.SH NAME\nx \\- y\n.nosuchmacro\n")
        f.flush()
        assert "warning" in run("man", "--warnings", "-l", f.name, env=env).stderr


def man_source(page):
    """The roff source as plain text: escapes for hyphens and fonts undone."""
    text = open(page).read()
    text = re.sub(r"\\f[BIRP]", "", text).replace("\\-", "-").replace("\\(lq", '"').replace("\\(rq", '"')
    return text


def man_sections(page, names):
    """The text of the named .SH sections."""
    out, keep = [], False
    for line in man_source(page).splitlines():
        if line.startswith(".SH "):
            keep = line[4:].strip().strip('"') in names
            continue
        if keep:
            out.append(line)
    return "\n".join(out)


OPT = re.compile(r"(?<![\w-])(--[a-z][a-z-]*[a-z]|-[a-zA-Z])(?![\w-])")


def options(text):
    return set(OPT.findall(text))


def test_version_agrees_with_the_man_pages():
    s = stage()
    for prog, page in PAGES.items():
        out = run(f"{s}/bin/{prog}", "--version").stdout
        m = re.fullmatch(rf"{re.escape(prog)} (\S+)\n", out)
        assert m, (prog, out)
        th = man_source(f"{s}/{page}").splitlines()[0]
        assert f'"agentd {m.group(1)}"' in th, (prog, out, th)


def test_help_agrees_with_the_man_pages():
    s = stage()
    # agentd: its --help and `agentd check --help` against SYNOPSIS, OPTIONS and AGENTD CHECK.
    helps = run(f"{s}/bin/agentd", "--help").stdout + run(f"{s}/bin/agentd", "check", "--help").stdout
    man = man_sections(f"{s}/{PAGES['agentd']}", {"SYNOPSIS", "OPTIONS", "AGENTD CHECK"})
    assert options(helps) == options(man), (
        f"agentd --help only: {options(helps) - options(man)}; agentd.8 only: {options(man) - options(helps)}")
    assert "check" in helps and ".B agentd check" in man_source(f"{s}/{PAGES['agentd']}")

    # agentctl: --help and every command's --help against SYNOPSIS, OPTIONS and COMMANDS; and the commands.
    ctl = f"{s}/bin/agentctl"
    main_help = run(ctl, "--help").stdout
    commands = re.findall(r"^  ([a-z-]+)  ", main_help.split("Commands:\n")[1].split("\n\n")[0], re.M)
    assert len(commands) >= 20 and "pending" in commands and "approve" in commands, commands
    helps = main_help + "".join(run(ctl, c, "--help").stdout for c in commands)
    page = f"{s}/{PAGES['agentctl']}"
    man = man_sections(page, {"SYNOPSIS", "OPTIONS", "COMMANDS"})
    assert options(helps) == options(man), (
        f"agentctl help only: {options(helps) - options(man)}; agentctl.1 only: {options(man) - options(helps)}")
    in_man = set(re.findall(r"^\.TP\n\.B ([a-z][a-z-]*)", man_sections(page, {"COMMANDS"}), re.M)) - {"help"}
    assert in_man == set(commands), f"help only: {set(commands) - in_man}; man only: {in_man - set(commands)}"

    if WEB:
        helps = run(f"{s}/bin/agentd-web", "--help").stdout
        man = man_sections(f"{s}/{PAGES['agentd-web']}", {"SYNOPSIS", "OPTIONS"})
        # Its usage text does not list --help and --version, which it takes.
        assert options(helps) | {"--help", "--version"} == options(man), (
            f"agentd-web --help only: {options(helps) - options(man)}; agentd-web.8 only: "
            f"{options(man) - options(helps)}")


def test_the_configuration_page_has_every_key():
    # The keys agentd reads (common/config.c and config_model.c, one function per section) against
    # agentd.ini(5)'s sections.
    src = open(REPO / "common/config.c").read() + open(REPO / "common/config_model.c").read()
    page = f"{stage()}/share/man/man5/agentd.ini.5"
    for funcs, section in ((("agentd_key", "budget_key"), "[agentd]"), (("model_key", "config_model_http_key"), "[model.NAME]"),
                           (("tool_key",), "[tool.NAME]"), (("mcp_key",), "[mcp.NAME]"),
                           (("iso_key",), "ISOLATION KEYS")):
        keys = set()
        for func in funcs:
            body = re.search(rf"^(?:static )?int {func}\(.*?^}}", src, re.S | re.M).group(0)
            keys |= set(re.findall(r'strcmp\(k, "([a-z_]+)"\)', body))
        documented = set(re.findall(r"^\.TP\n\.BR? ([a-z_]+)\b", man_sections(page, {section}), re.M))
        assert keys and keys == documented, f"{section}: code only {keys - documented}; page only {documented - keys}"


def test_the_staged_agentd_runs_the_staged_worker():
    s = stage()
    harness.AGENTD_BIN, saved = f"{s}/bin/agentd", harness.AGENTD_BIN
    harness.AGENTCTL_BIN, saved_ctl = f"{s}/bin/agentctl", harness.AGENTCTL_BIN
    # The installed worker is the static one, which memcheck cannot follow (docs/operations.md): under
    # AGENTD_VALGRIND only agentd runs in memcheck here.
    harness.VALGRIND_WORKERS, saved_vw = False, harness.VALGRIND_WORKERS
    try:
        # socket_group = agentd names the group the package's sysusers file makes, which this machine need
        # not have: the rest of the shipped configuration runs as it is.
        shipped = open(f"{s}/etc/agentd/agentd.ini").read().replace("\nsocket_group = agentd\n", "\n")
        with Agentd(config=shipped) as a:
            assert f"config {a.config_path}" in a.log() or f"config {os.path.realpath(a.config_path)}" in a.log()
            c = a.ctl("create", "--model", "echo", "--tool", "approve")[1].strip()
            a.ctl("send", c, "hello")
            wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
            assert a.events(c)[1]["content"]["text"] == "echo: hello"
            a.send(c, "/tool approve")
            if not harness.VALGRIND:
                # No --worker given: agentd ran the agentd-worker installed beside it.
                pid = wait_for(lambda: a.worker_pid(c), 10, "a live worker")
                assert os.readlink(f"/proc/{pid}/exe") == f"{s}/bin/agentd-worker"
            pending = wait_for(lambda: a.ctl("-q", "pending")[1].split(), 10, "the pending approval")
            # The installed completion, as bash runs it on TAB (the installed agentctl first on PATH).
            def complete(*words):
                script = (f"source {s}/share/bash-completion/completions/agentctl\n"
                          f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); "
                          f"COMP_CWORD={len(words) - 1}; _agentctl; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
                env = dict(os.environ, PATH=f"{s}/bin:" + os.environ["PATH"])
                return sorted(run("bash", "-c", script, env=env).stdout.split())
            assert complete("agentctl", "pen") == ["pending"]
            assert complete("agentctl", "tool-c") == ["tool-call", "tool-calls"]
            assert complete("agentctl", "approve", "--c") == ["--comment"]
            assert complete("agentctl", "-s", a.socket, "approve", "") == pending
            assert complete("agentctl", "-s", a.socket, "get", "") == [c]
    finally:
        harness.AGENTD_BIN, harness.AGENTCTL_BIN, harness.VALGRIND_WORKERS = saved, saved_ctl, saved_vw


def test_cpack_builds_a_deb():
    out = tempfile.mkdtemp(prefix="agentd-cpack-")
    try:
        p = run("cpack", "--config", os.path.join(BUILD, "CPackConfig.cmake"), "-B", out)
        debs = [f for f in os.listdir(out) if f.endswith(".deb")]
        assert len(debs) == 1, (os.listdir(out), p.stdout)
        deb = os.path.join(out, debs[0])
        listing = run("dpkg-deb", "-c", deb).stdout
        files = {}
        for line in listing.splitlines():
            f = line.split()
            if not f[0].startswith("d"):
                files[f[5].lstrip(".")] = f[0]
        # The same files as the staged install, the configuration under /etc, the rest under /usr.
        want = {("/" if k.startswith("etc/") else "/usr/") + k: m for k, m in EXPECTED.items()}
        assert set(files) == set(want), f"deb only: {set(files) - set(want)}; missing: {set(want) - set(files)}"
        for f, m in want.items():
            assert files[f] == ("-rwxr-xr-x" if m == 0o755 else "-rw-r--r--"), (f, files[f])
        info = run("dpkg-deb", "-f", deb, "Package", "Depends").stdout
        assert "Package: agentd" in info and "libsystemd0" in info and "liblmdb0" in info, info
        ctl = run("dpkg-deb", "-I", deb).stdout
        assert "conffiles" in ctl and "postinst" in ctl, ctl
        # The units in the package name /usr and /etc, not the build's prefix.
        x = os.path.join(out, "x")
        run("dpkg-deb", "-x", deb, x)
        unit = open(f"{x}/usr/lib/systemd/system/agentd.service").read()
        assert "ExecStart=/usr/bin/agentd --data /var/lib/agentd --socket /run/agentd/agentd.sock " \
               "--config /etc/agentd/agentd.ini\n" in unit, unit
    finally:
        shutil.rmtree(out, ignore_errors=True)


def teardown():
    if _stage:
        shutil.rmtree(_stage, ignore_errors=True)


try:
    harness.main(globals())
finally:
    teardown()
