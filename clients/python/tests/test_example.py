"""examples/approval_agent.py run as a program against agentd: it waits for the approval, a person
answers (here through the client, as agentctl resolve would), and it acts on the answer."""
import os
import subprocess
import sys

import pytest

from agentd_client import Client
from conftest import CLIENT_ROOT, scaled

EXAMPLE = CLIENT_ROOT / "examples" / "approval_agent.py"
CONFIG = """
[tool.approve_payment]
executor = human
prompt = Approve this payment?
expires = {expires}
"""


def start_example(a, *args):
    env = dict(os.environ, PYTHONPATH=str(CLIENT_ROOT), AGENTD_SOCKET=a.socket)
    return subprocess.Popen([sys.executable, str(EXAMPLE), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def read_until(p, prefix):
    """Lines of the example's stdout up to the one starting with prefix (which is returned last)."""
    lines = []
    for line in p.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"the example ended without '{prefix}': {lines}\n{p.stderr.read()}")


@pytest.mark.parametrize("answer", ["approve", "deny", "approve after an agentd restart"])
def test_the_agent_waits_for_the_person(start_agentd, answer):
    a = start_agentd(CONFIG.format(expires="1h"))
    p = start_example(a, "--amount", "120")
    try:
        lines = read_until(p, "waiting for approval: ")
        conv = lines[0].split(": ", 1)[1]
        tc_id = lines[-1].split()[3]
        assert lines[-1] == f"waiting for approval: {tc_id} (Approve this payment?)"
        with Client(a.socket) as c:
            pending = c.tool_calls(conv, status="pending")
            assert [(t.id, t.name, t.args) for t in pending] == [(tc_id, "approve_payment", {"amount": 120})]
            assert p.poll() is None  # still waiting
            if answer.endswith("restart"):
                a.restart()
                assert p.poll() is None
            if answer.startswith("approve"):
                c.resolve(tc_id, {"approved": True})
            else:
                c.resolve(tc_id, "no", status="errored")
        out, err = p.communicate(timeout=scaled(20))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if answer.startswith("approve"):
        assert out.splitlines() == ['decision: resolved {"approved": true}',
                                    f'model: {tc_id} resolved: {{"approved":true}}', "paying 120"], (out, err)
        assert p.returncode == 0
    else:
        assert out.splitlines() == ['decision: errored "no"', f'model: {tc_id} errored: "no"', "not paying"], (out, err)
        assert p.returncode == 3


def test_an_expired_approval_is_not_paid(start_agentd):
    a = start_agentd(CONFIG.format(expires="300ms"))
    p = start_example(a)
    try:
        out, err = p.communicate(timeout=scaled(20))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = out.splitlines()
    tc_id = lines[1].split()[3]
    assert lines[1:] == [f"waiting for approval: {tc_id} (Approve this payment?)", "decision: expired null",
                         f"model: {tc_id} expired: null", "not paying"], (out, err)
    assert p.returncode == 3


def test_no_agentd_is_a_clear_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(CLIENT_ROOT))
    p = subprocess.run([sys.executable, str(EXAMPLE), "--socket", str(tmp_path / "none.sock")],
                       capture_output=True, text=True, env=env, timeout=scaled(20))
    assert p.returncode == 1 and "cannot connect to" in p.stderr and "is agentd running?" in p.stderr, p.stderr
