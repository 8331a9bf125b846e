"""agentd-web in a real browser (docs/web.md): headless Chromium (Debian's, /usr/bin/chromium) driven by
tests/web/browser.mjs with puppeteer-core (installed into tests/web/ by scripts/deps.sh). This starts the
real agentd and agentd-web; the script drives the page and the real agentctl: a wrong token is refused, the
one-time login link works once, a new approval appears live with a <script> payload shown as text, a double
click approves once and the model's answer appears in the live tail, deny, answered elsewhere, expiry,
stale said politely, streamed deltas, a conversation's runs live (a kill -9 of the worker mid-turn shows its
run interrupted, then attempt 2 completed), CSRF, the conversation filter and the status panel (its node;
under AGENTD_TEST_STORE=pg a second node on the same store, listed live, then expired once killed); then
tests/web/conversations.mjs: the conversation list filtered by metadata, status, model and updated time,
bookmarked and paged, with markup in metadata shown as text."""
import os
import shutil
import subprocess

import harness
from harness import Agentd, AGENTCTL_BIN, scaled, wait_for
from webutil import AgentdWeb, WEB_BIN

WEB_TESTS = harness.REPO / "tests" / "web"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
NODE = "[agentd]\nnode_id = {}\nlease_time = 1s\nheartbeat = 200ms\n"


class SecondNode(Agentd):
    """Another node on the first one's PostgreSQL store, with a run directory of its own."""

    def __init__(self, first, config):
        self.target = harness.pg_target(first.data_dir)
        super().__init__(config=config, start=False)

    def command(self):
        return [harness.AGENTD_BIN, "--store", self.target, "--run-dir", self.dir, "--socket", self.socket,
                "--config", self.config_path]


def test_the_page_in_chromium():
    node = shutil.which("node")
    assert node, "node is missing: run scripts/deps.sh"
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: run scripts/deps.sh"
    assert (WEB_TESTS / "node_modules" / "puppeteer-core").is_dir(), \
        "tests/web/node_modules/puppeteer-core is missing: run scripts/deps.sh"
    a = Agentd(start=False)
    gate = os.path.join(a.dir, "gate")
    run_gate = os.path.join(a.dir, "run-gate")
    blocker = a.script("blocker.py", f"""
        import json, os, sys, time
        json.load(sys.stdin)
        while not os.path.exists({run_gate!r}):
            time.sleep(0.02)
        print(json.dumps({{"text": "unblocked answer"}}))
        """)
    streamer = a.script("streamer.py", f"""
        import json, os, sys, time
        json.load(sys.stdin)
        for part in ("partial one, ", "partial two"):
            print(json.dumps({{"delta": part}}), flush=True)
        while not os.path.exists({gate!r}):
            time.sleep(0.02)
        print(json.dumps({{"text": "streamed answer"}}))
        """)
    tools = f"""
[tool.approve]
executor = human
prompt = Pay it?
expires = 1h

[tool.quick]
executor = human
prompt = Quick?
expires = 4s

[tool.esc]
executor = human
prompt = First look?
expires = 2s
on_expiry = escalate
escalate_to = approve

[tool.pair]
executor = human
prompt = Two of you?
expires = 1h
approvers = 2

[model.streamer]
command = python3 {streamer}

[model.blocker]
command = python3 {blocker}

[model.waiter]
command = python3 -c "import json, sys, time; json.load(sys.stdin); time.sleep(3600)"
"""
    a.write_config(NODE.format("web-a") + tools)
    # Under AGENTD_TEST_STORE=pg a second node shares the store: the status panel lists both. On LMDB a
    # store has one node: the panel names it.
    b = SecondNode(a, NODE.format("web-b") + tools) if harness.PG else None
    with a:
        a.start()
        second = {}
        if b:
            b.start()
            wait_for(lambda: len(a.ok({"op": "nodes"})["nodes"]) == 2, 10, "the second node listed")
            second = {"SECOND_NODE": "web-b", "SECOND_NODE_PID": str(b.pid)}
        # A conversation of 52 runs, one a turn, for the Runs table's paging (50 a page).
        many = a.ok({"op": "create", "conversation": "many", "settings": {"model": "echo"}})["conversation"]
        for i in range(52):
            a.send(many, f"m{i}")
            wait_for(lambda: [(r["id"], r["status"]) for r in
                              a.ok({"op": "runs", "conversation": many, "limit": 1})["runs"]] == [(i + 1, "completed")],
                     10, f"run {i + 1} completed")
        try:
            with AgentdWeb(a, ["--poll-ms", "300"]) as w:
                env = dict(os.environ, WEB_BASE=w.base, WEB_LINK=w.link, AGENTCTL=AGENTCTL_BIN,
                           AGENTD_SOCKET=a.socket, GATE=gate, RUN_GATE=run_gate, NODE_ID="web-a", CHROMIUM=CHROMIUM,
                           AGENTD_TEST_SLOW=str(harness.TIME_SCALE), **second)
                p = subprocess.run([node, str(WEB_TESTS / "browser.mjs")], env=env, cwd=str(WEB_TESTS),
                                   capture_output=True, text=True, timeout=scaled(240))
                print(p.stdout, end="", flush=True)
                assert p.returncode == 0, f"browser.mjs failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
            # The same agentd, through an agentd-web with a users file (tests/web/accounts.mjs).
            users = os.path.join(a.dir, "users")
            with open(users, "w") as f:
                for name, role, pw in [("vic", "viewer", "v-pass"), ("opal", "operator", "o-pass")]:
                    h = subprocess.run([WEB_BIN, "--hash-password"], input=pw + "\n", capture_output=True, text=True,
                                       check=True, timeout=scaled(30)).stdout.strip()
                    f.write(f"{name} {role} {h}\n")
            with AgentdWeb(a, ["--users", users]) as w:
                env = dict(os.environ, WEB_BASE=w.base, AGENTCTL=AGENTCTL_BIN, AGENTD_SOCKET=a.socket, CHROMIUM=CHROMIUM,
                           AGENTD_TEST_SLOW=str(harness.TIME_SCALE))
                p = subprocess.run([node, str(WEB_TESTS / "accounts.mjs")], env=env, cwd=str(WEB_TESTS),
                                   capture_output=True, text=True, timeout=scaled(120))
                print(p.stdout, end="", flush=True)
                assert p.returncode == 0, f"accounts.mjs failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
        finally:
            if b:
                b.close()


def test_the_conversation_list_in_chromium():
    node = shutil.which("node")
    assert node and os.access(CHROMIUM, os.X_OK), "node or chromium is missing: run scripts/deps.sh"
    with Agentd(config="[model.other]\ncommand = python3 -c 'print(1)'\n") as a, AgentdWeb(a) as w:
        env = dict(os.environ, WEB_BASE=w.base, WEB_LINK=w.link, AGENTCTL=AGENTCTL_BIN, AGENTD_SOCKET=a.socket,
                   CHROMIUM=CHROMIUM, AGENTD_TEST_SLOW=str(harness.TIME_SCALE))
        p = subprocess.run([node, str(WEB_TESTS / "conversations.mjs")], env=env, cwd=str(WEB_TESTS),
                           capture_output=True, text=True, timeout=scaled(120))
        print(p.stdout, end="", flush=True)
        assert p.returncode == 0, f"conversations.mjs failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"


harness.main(globals())
