"""A tiny MCP server (stdio) for tests/proc/test_unknown.py: tools with each kind of annotation, whose
calls append {"name", "_meta"} to the file named by argv[1] (the effect, and what the server received),
then wait for argv[1] + ".go" before answering, so a test can kill the worker mid-call.

    ro        readOnlyHint: true             idempotent by its annotations
    idem      idempotentHint: true           idempotent by its annotations
    destroy   destructiveHint: true          not idempotent
    plain     no annotations                 not idempotent
"""
import json
import os
import sys
import time

log = sys.argv[1]
TOOLS = [
    {"name": "ro", "annotations": {"readOnlyHint": True}},
    {"name": "idem", "annotations": {"readOnlyHint": False, "idempotentHint": True}},
    {"name": "destroy", "annotations": {"destructiveHint": True}},
    {"name": "plain"},
]


def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    m = json.loads(line)
    meth, mid = m.get("method"), m.get("id")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                                                       "serverInfo": {"name": "annotated", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            dict(t, description=t["name"], inputSchema={"type": "object"}) for t in TOOLS]}})
    elif meth == "tools/call":
        p = m["params"]
        with open(log, "a") as f:
            f.write(json.dumps({"name": p["name"], "_meta": p.get("_meta")}) + "\n")
        while not os.path.exists(log + ".go"):
            time.sleep(0.01)
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "did " + p["name"]}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(meth)}})
