#!/usr/bin/env python3
"""A model adapter for OpenAI-compatible chat-completions APIs (agentd's model protocol, docs/configuration.md).

Configure it as a model:

    [model.gpt]
    command = /usr/bin/env python3 scripts/models/openai_compat.py --model gpt-4o-mini
    timeout = 120s
    retries = 2
    env = OPENAI_API_KEY OPENAI_BASE_URL

Environment: OPENAI_API_KEY (sent as a bearer token when set), OPENAI_BASE_URL (default
https://api.openai.com/v1), OPENAI_MODEL (when --model is not given). agentd passes on only the variables the
model's `env` key names (docs/tools.md, "Isolation").

Reads one JSON request on stdin ({"task": "turn" | "summarize", "system", "summary", "messages", "tools",
"params"}), calls POST {base}/chat/completions with stream=true, prints {"delta": "..."} lines as text
arrives and one final {"text", "tool_calls", "usage"} line. Tool calls map both ways: the log's tool_call
events become the assistant message's tool_calls, tool_result/resolution events become "tool" messages,
and the API's streamed tool calls (id, name, argument chunks) become agentd tool calls. Any HTTP or
protocol failure exits 1 with the reason on stderr, so agentd retries per the model's `retries`.
Standard library only.
"""
import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def content_text(content):
    if isinstance(content, dict) and isinstance(content.get("text"), str) and len(content) == 1:
        return content["text"]
    return json.dumps(content)


def to_chat(req):
    """agentd's request -> chat-completions messages."""
    system = req.get("system") or ""
    summary = req.get("summary")
    if summary:
        text = content_text(summary.get("content"))
        system = (system + "\n\n" if system else "") + "Summary of the earlier conversation:\n" + text
    msgs = [{"role": "system", "content": system}] if system else []
    last_assistant = None
    for ev in req.get("messages", []):
        t, c = ev.get("type"), ev.get("content") or {}
        if t == "user_msg":
            msgs.append({"role": "user", "content": content_text(c)})
            last_assistant = None
        elif t == "assistant_msg":
            last_assistant = {"role": "assistant", "content": c.get("text", "")}
            msgs.append(last_assistant)
        elif t == "tool_call" and last_assistant is not None:
            last_assistant.setdefault("tool_calls", []).append({
                "id": c["tool_call_id"], "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("args", {}))}})
        elif t in ("tool_result", "resolution"):
            msgs.append({"role": "tool", "tool_call_id": c["tool_call_id"],
                         "content": json.dumps({"status": c.get("status"), "result": c.get("result")})})
    return msgs


def to_tools(req):
    return [{"type": "function", "function": {
        "name": t["name"], "description": t.get("description", ""),
        # An MCP server's tools come with their JSON Schema; agentd's own tools take any object.
        "parameters": t.get("input_schema") or {"type": "object", "additionalProperties": True}}}
        for t in req.get("tools", [])]


def call(args, req):
    base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
    model = args.model or os.environ.get("OPENAI_MODEL")
    if not model:
        sys.exit("openai_compat: no model: give --model or set OPENAI_MODEL")
    if req.get("task") == "summarize":
        msgs = to_chat(req) + [{"role": "user", "content":
                                "Summarize the conversation above in a few sentences, keeping every fact, "
                                "decision and open question a later turn would need."}]
        tools = []
    else:
        msgs, tools = to_chat(req), to_tools(req)
    body = {"model": model, "messages": msgs, "stream": True, "stream_options": {"include_usage": True}}
    body.update({k: v for k, v in (req.get("params") or {}).items() if k not in ("model", "messages", "stream")})
    if tools:
        body["tools"] = tools
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = "Bearer " + os.environ["OPENAI_API_KEY"]
    r = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(), headers, method="POST")
    try:
        resp = urllib.request.urlopen(r, timeout=args.timeout)
    except urllib.error.HTTPError as e:
        sys.exit(f"openai_compat: HTTP {e.code}: {e.read()[:500].decode('utf-8', 'replace')}")
    except (urllib.error.URLError, OSError) as e:
        sys.exit(f"openai_compat: cannot reach {base}: {e}")
    text, calls, usage = [], {}, {}
    with resp:
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                    emit({"delta": delta["content"]})
                for tc in delta.get("tool_calls") or []:
                    acc = calls.setdefault(tc.get("index", 0), {"id": None, "name": "", "arguments": ""})
                    acc["id"] = tc.get("id") or acc["id"]
                    fn = tc.get("function") or {}
                    acc["name"] += fn.get("name") or ""
                    acc["arguments"] += fn.get("arguments") or ""
    out_calls = []
    for _, c in sorted(calls.items()):
        try:
            a = json.loads(c["arguments"]) if c["arguments"] else {}
        except json.JSONDecodeError:
            a = {"raw": c["arguments"]}
        call_obj = {"name": c["name"], "args": a if isinstance(a, dict) else {"value": a}}
        if c["id"]:
            call_obj["id"] = c["id"]
        out_calls.append(call_obj)
    emit({"text": "".join(text), "tool_calls": out_calls,
          "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                    "output_tokens": usage.get("completion_tokens", 0), "cost": 0}})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="the API's model name (default $OPENAI_MODEL)")
    p.add_argument("--timeout", type=float, default=110, help="HTTP timeout in seconds (default 110)")
    args = p.parse_args()
    try:
        req = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        sys.exit(f"openai_compat: bad request on stdin: {e}")
    call(args, req)


if __name__ == "__main__":
    main()
