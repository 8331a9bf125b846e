"""turnsutil.py: a scripted model and tool for the turn-control process tests (test_turns.py,
test_cancel.py), with the real agentd, workers and agentctl.

The model is a Python script that records each call (DIR/model.log: {"task", "pid"}) and acts on the last
user message:

    block NAME   wait for DIR/rel/NAME, then answer "released NAME"
    loop         call the tool `work` in every round, also when answering its results
    tool         call the tool `work` with {"block": "t"} once (it waits for DIR/rel/t), then answer "after"
    ask          call the human tool `approve` once, then answer "after"
    crash        kill the worker running it (SIGKILL to its parent) unless DIR/rel/nocrash exists; then
                 answer "survived"
    else         answer "re: TEXT"

The tool `work` (idempotent: an interrupted dispatch is run again) records each dispatch (DIR/tool.log: {"id", "pid"}) and with args {"block": NAME} waits
for DIR/rel/NAME.

    setup(Agentd(start=False), agentd_section="", model_script=MODEL) -> a   writes scripts (another model
        script, given the same arguments, in place of this one) and configuration, starts agentd
    records(path), release(a, name), new_conv(a, **settings), types(a, c), conv_get(a, c),
    last_is(a, c, type, text=None)
"""
import json
import os
import pathlib
import sys

PY = sys.executable or "python3"

MODEL = r'''
import json, os, sys, time
log, d = sys.argv[1], sys.argv[2]
req = json.load(sys.stdin)
msgs = req.get("messages", [])
with open(log, "a") as f:
    f.write(json.dumps({"task": req["task"], "pid": os.getpid()}) + "\n")

def answer(text, calls=()):
    print(json.dumps({"text": text, "tool_calls": list(calls),
                      "usage": {"input_tokens": 1, "output_tokens": 1, "cost": 0}}))
    sys.exit(0)

if req["task"] != "turn":
    answer("summary")
users = [m["content"].get("text", "") for m in msgs if m["type"] == "user_msg"]
text = users[-1] if users else ""
settled = msgs and msgs[-1]["type"] in ("tool_result", "resolution")
cmd, _, arg = text.partition(" ")
if cmd == "loop":
    answer("again", [{"name": "work", "args": {}}])
if settled:
    answer("after")
if cmd == "block":
    while not os.path.exists(os.path.join(d, "rel", arg)):
        time.sleep(0.01)
    answer("released " + arg)
if cmd == "tool":
    answer("calling", [{"name": "work", "args": {"block": "t"}}])
if cmd == "ask":
    answer("asking", [{"name": "approve", "args": {}}])
if cmd == "crash":
    if not os.path.exists(os.path.join(d, "rel", "nocrash")):
        os.kill(os.getppid(), 9)
        time.sleep(60)  # PR_SET_PDEATHSIG ends us with the worker
    answer("survived")
answer("re: " + text)
'''

TOOL = r'''
import json, os, sys, time
log, d = sys.argv[1], sys.argv[2]
req = json.load(sys.stdin)
with open(log, "a") as f:
    f.write(json.dumps({"id": req["tool_call_id"], "pid": os.getpid()}) + "\n")
blk = (req.get("args") or {}).get("block")
if blk:
    while not os.path.exists(os.path.join(d, "rel", blk)):
        time.sleep(0.01)
print(json.dumps({"done": req["tool_call_id"]}))
'''


def setup(a, agentd_section="", model_script=MODEL):
    model = a.script("model.py", model_script)
    tool = a.script("tool.py", TOOL)
    os.makedirs(os.path.join(a.dir, "rel"), exist_ok=True)
    a.model_log = os.path.join(a.dir, "model.log")
    a.tool_log = os.path.join(a.dir, "tool.log")
    a.write_config("[agentd]\n" + agentd_section + f"""
[model.m]
command = {PY} {model} {a.model_log} {a.dir}
timeout = 120s
retries = 0
# "crash" kills its own worker: the sandbox would refuse that signal
sandbox = no

[tool.work]
executor = server
command = {PY} {tool} {a.tool_log} {a.dir}
idempotent = yes
timeout = 120s

[tool.approve]
executor = human
prompt = Approve?
expires = 1h
""")
    a.start()
    return a


def records(path):
    try:
        with open(path) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def release(a, name):
    pathlib.Path(a.dir, "rel", name).touch()


def new_conv(a, **settings):
    return a.create(settings={"model": "m", "tools": ["work", "approve"], **settings})


def types(a, c):
    return [e["type"] for e in a.events(c)]


def conv_get(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]


def last_is(a, c, ty, text=None):
    evs = a.events(c)
    return evs and evs[-1]["type"] == ty and (text is None or evs[-1]["content"].get("text") == text)
