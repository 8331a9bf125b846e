"""The examples in scripts/: the example model command (the model process protocol) driving the calc tool,
and the calc tool's idempotency by tool_call_id."""
import json
import os
import subprocess
import tempfile

import harness
from harness import Agentd, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "scripts", "models", "example.py")
CALC = os.path.join(ROOT, "scripts", "tools", "calc.py")


def test_example_model_calls_calc_and_counts_new_messages():
    with Agentd(start=False) as a:
        a.write_config(f"""
            [model.example]
            command = python3 {EXAMPLE}
            [tool.calc]
            command = python3 {CALC} --journal {os.path.join(a.dir, "journal")}
            """)
        a.start()
        c = a.create(settings={"model": "example", "tools": ["calc"]})
        w = a.watch(c)
        a.send(c, "calc 2 * (3 + 4)")
        res = wait_for(lambda: a.events(c, type="tool_result"), 20, "the calc result")[0]["content"]
        assert res["status"] == "resolved" and res["result"]["value"] == 14, res
        texts = lambda: [e["content"]["text"] for e in a.events(c, type="assistant_msg")]  # noqa: E731
        wait_for(lambda: len(texts()) == 2, 20, "the turn after the result")
        assert texts()[1] == f"{res['tool_call_id']} resolved: " + json.dumps(res["result"]), texts()
        deltas = []
        while len(deltas) < 3:
            line = w.recv()
            if "delta" in line:
                deltas.append(line["delta"]["text"])
        w.close()
        a.send(c, "three little words")
        wait_for(lambda: len(texts()) == 3, 20, "the third turn")
        assert texts()[2] == "3 words", texts()
        usage = a.ok({"op": "get", "conversation": c})["conversation"]["usage"]
        assert usage["output_tokens"] > 0, usage


def run_calc(journal, call_id, expr):
    return subprocess.run(["python3", CALC, "--journal", journal],
                          input=json.dumps({"tool_call_id": call_id, "name": "calc", "args": {"expr": expr},
                                            "conversation": "c"}),
                          env=dict(os.environ, AGENTD_TOOL_CALL_ID=call_id), capture_output=True, text=True)


def test_calc_is_idempotent_by_tool_call_id():
    with tempfile.TemporaryDirectory() as d:
        r1 = run_calc(d, "t1", "1 + 2")
        assert r1.returncode == 0 and json.loads(r1.stdout)["value"] == 3, r1
        r2 = run_calc(d, "t1", "100 * 100")  # a re-dispatch: same id, answered from the journal
        assert r2.stdout == r1.stdout, r2
        bad = run_calc(d, "t2", "__import__('os')")
        assert bad.returncode != 0 and "only numbers" in bad.stderr, bad
        assert run_calc(d, "t3", "1/0").returncode != 0


harness.main(globals())
