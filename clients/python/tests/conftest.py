"""pytest fixtures: the real agentd (tests/proc/harness.py) in a temporary directory per test, and the
client package from this checkout (not an installed copy)."""
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CLIENT_ROOT = HERE.parent
REPO = CLIENT_ROOT.parents[1]
sys.path.insert(0, str(CLIENT_ROOT))
sys.path.insert(0, str(REPO / "tests" / "proc"))

import harness  # noqa: E402

HUMAN_TOOL = """
[tool.approve]
executor = human
prompt = Approve the payment?
expires = 1h
"""


@pytest.fixture
def start_agentd():
    """start_agentd(config=None, **kw) -> harness.Agentd, started; every one is stopped (asserting a clean
    exit unless the test ended it) and removed after the test."""
    started = []

    def start(config=None, **kw):
        a = harness.Agentd(config=config, **kw)
        started.append(a)
        return a

    yield start
    try:
        for a in started:
            if a.running():
                a.stop()
            a.check_sanitizers()
    finally:
        for a in started:
            a.close()


@pytest.fixture
def agentd(start_agentd):
    """agentd with the human tool `approve` configured."""
    return start_agentd(HUMAN_TOOL)


def wait_for(pred, timeout=10, what="a condition"):
    return harness.wait_for(pred, timeout, what)


def scaled(secs):
    return harness.scaled(secs)
