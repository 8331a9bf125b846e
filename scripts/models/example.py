#!/usr/bin/env python3
"""An example model command for agentd's model process protocol (docs/configuration.md): the shape of an
adapter, with no network. Real APIs need no script: agentd's built-in kinds `openai` and `anthropic`
(docs/models.md) talk to them directly.

    [model.example]
    command = python3 scripts/models/example.py

It reads one JSON request on stdin and answers the user messages its last turn did not see: "calc EXPR"
asks for the `calc` tool (when the conversation may use it); anything else is counted in words. It streams
its text as {"delta"} lines, then prints one final {"text", "tool_calls", "usage"} line and exits 0.

Which messages are new: the log's events follow the order things happened, so a message sent while the
previous turn ran sits before that turn's assistant_msg; it is new when its seq is after that
assistant_msg's context_seq (the last seq the turn saw), not when it comes after it in the list.
"""
import json
import sys


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    req = json.load(sys.stdin)
    events = req.get("messages", [])
    if req.get("task") == "summarize":
        texts = [e["content"].get("text", "") for e in events if e["type"] in ("user_msg", "assistant_msg")]
        emit({"text": f"{len(texts)} messages: " + " / ".join(texts)[:500], "tool_calls": [], "usage": {}})
        return
    seen, last = 0, -1
    for i, e in enumerate(events):
        if e["type"] == "assistant_msg":
            seen, last = e["content"].get("context_seq", 0), i
    tools = {t["name"] for t in req.get("tools", [])}
    calls, lines = [], []
    for i, e in enumerate(events):
        c = e.get("content") or {}
        if e["type"] == "user_msg" and e["seq"] > seen:
            text = c.get("text", json.dumps(c))
            if text.startswith("calc ") and "calc" in tools:
                calls.append({"name": "calc", "args": {"expr": text[5:]}})
            else:
                lines.append(f"{len(text.split())} words")
        elif e["type"] in ("tool_result", "resolution") and i > last:
            lines.append(f"{c['tool_call_id']} {c['status']}: {json.dumps(c.get('result'))}")
    text = "\n".join(lines)
    for word in text.split(" "):
        emit({"delta": word + " "})
    emit({"text": text, "tool_calls": calls,
          "usage": {"input_tokens": len(events), "output_tokens": len(text.split()), "cost": 0}})


if __name__ == "__main__":
    main()
