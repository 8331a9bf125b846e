"""fake_anthropic.py: a fake Anthropic Messages API (POST /v1/messages), as strict as the real one.

Validation (the real API's rules and messages, answered with its error JSON
{"type": "error", "error": {"type", "message"}, "request_id"}):
  - x-api-key (401 authentication_error) and anthropic-version headers
  - model a string, max_tokens a positive integer, messages a non-empty array
  - roles user/assistant only (the system prompt is the top-level `system`), the first one user, alternating
  - content a non-empty string or an array of blocks; text blocks non-empty
  - tool_use blocks only in assistant messages, ids unique; every tool_use answered by a tool_result in the
    next message (a user message), tool_result blocks first in it, each naming a tool_use of the message
    right before
  - tool_use or tool_result blocks need `tools`; tools: name ^[a-zA-Z0-9_-]{1,64}$ and input_schema object
Streams: message_start, content_block_start/delta/stop (text_delta, input_json_delta), ping, message_delta,
message_stop, each with its `event:` line. A step may also give "stream_error": an `error` event (e.g.
overloaded_error) after a few events, as the real API sends mid-stream. See fake_http.py for the rest.
"""

import json
import re

from fake_http import FakeAPI, split_args

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _err(message, etype="invalid_request_error"):
    return {"type": "error", "error": {"type": etype, "message": message}, "request_id": "req_fake"}


class FakeAnthropic(FakeAPI):
    name = "anthropic"
    path = "/v1/messages"

    def error_json(self, status, message=None):
        kinds = {401: ("authentication_error", "invalid x-api-key"),
                 403: ("permission_error", "Your API key does not have permission to use the specified resource."),
                 404: ("not_found_error", "model: not found"),
                 429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
                 500: ("api_error", "Internal server error"),
                 529: ("overloaded_error", "Overloaded")}
        etype, default = kinds.get(status, ("invalid_request_error", "Bad request"))
        if status >= 500 and status not in kinds:
            etype, default = "api_error", "Internal server error"
        return _err(message or default, etype)

    def validate(self, headers, body):
        h = {k.lower(): v for k, v in headers.items()}
        if self.key and h.get("x-api-key") != self.key:
            return 401, _err("invalid x-api-key", "authentication_error")
        if not h.get("anthropic-version"):
            return 400, _err("anthropic-version: header is required")
        if not isinstance(body, dict):
            return 400, _err("Invalid request body")
        if not isinstance(body.get("model"), str):
            return 400, _err("model: Field required")
        mt = body.get("max_tokens")
        if not isinstance(mt, int) or isinstance(mt, bool):
            return 400, _err("max_tokens: Field required")
        if mt < 1:
            return 400, _err("max_tokens: Input should be greater than or equal to 1")
        sysp = body.get("system")
        if sysp is not None and not isinstance(sysp, (str, list)):
            return 400, _err("system: Input should be a valid list")
        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                return 400, _err("tools: Input should be a valid list")
            for i, t in enumerate(tools):
                if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not NAME_RE.match(t["name"]):
                    return 400, _err(f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
                if not isinstance(t.get("input_schema"), dict):
                    return 400, _err(f"tools.{i}.custom.input_schema: Field required")
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return 400, _err("messages: at least one message is required")
        uses_tools = False
        prev_uses = set()  # tool_use ids of the message right before
        seen = set()
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                return 400, _err(f"messages.{i}: Input should be a valid dictionary")
            role = m.get("role")
            if role == "system":
                return 400, _err("messages: Unexpected role \"system\". The Messages API accepts a top-level "
                                 "`system` parameter, not \"system\" as an input message role.")
            if role not in ("user", "assistant"):
                return 400, _err(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            if i == 0 and role != "user":
                return 400, _err("messages: first message must use the \"user\" role")
            if i > 0 and msgs[i - 1].get("role") == role:
                return 400, _err(f"messages: roles must alternate between \"user\" and \"assistant\", but found "
                                 f"multiple \"{role}\" roles in a row")
            c = m.get("content")
            if isinstance(c, str):
                if not c:
                    return 400, _err(f"messages.{i}: user messages must have non-empty content"
                                     if role == "user" else f"messages.{i}: all messages must have non-empty content "
                                     "except for the optional final assistant message")
                blocks = []
            elif isinstance(c, list) and c:
                blocks = c
            else:
                return 400, _err(f"messages.{i}: all messages must have non-empty content except for the optional "
                                 "final assistant message")
            uses, results, after_text = set(), set(), False
            for j, b in enumerate(blocks):
                bt = b.get("type") if isinstance(b, dict) else None
                if bt == "text":
                    if not isinstance(b.get("text"), str) or not b["text"]:
                        return 400, _err(f"messages.{i}.content.{j}.text: text content blocks must be non-empty")
                    after_text = True
                elif bt == "tool_use":
                    if role != "assistant":
                        return 400, _err(f"messages.{i}.content.{j}: tool_use blocks are only allowed in "
                                         "assistant messages")
                    if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str) or \
                            not isinstance(b.get("input"), dict):
                        return 400, _err(f"messages.{i}.content.{j}.tool_use: id, name and input are required")
                    if b["id"] in seen:
                        return 400, _err(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
                    seen.add(b["id"])
                    uses.add(b["id"])
                    uses_tools = True
                elif bt == "tool_result":
                    if role != "user":
                        return 400, _err(f"messages.{i}.content.{j}: tool_result blocks are only allowed in user "
                                         "messages")
                    if after_text:
                        return 400, _err(f"messages.{i}: tool_result blocks must come first in the content, before "
                                         "any other block")
                    tid = b.get("tool_use_id")
                    if tid not in prev_uses or tid in results:
                        return 400, _err(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                                         f"`tool_result` blocks: {tid}. Each `tool_result` block must have a "
                                         "corresponding `tool_use` block in the previous message.")
                    rc = b.get("content")
                    if rc is not None and not isinstance(rc, (str, list)):
                        return 400, _err(f"messages.{i}.content.{j}.content: Input should be a valid string")
                    results.add(tid)
                    uses_tools = True
                else:
                    return 400, _err(f"messages.{i}.content.{j}.type: Input tag '{bt}' found using 'type' does not "
                                     "match any of the expected tags")
            if prev_uses and prev_uses - results:
                return 400, _err(f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                                 f"immediately after: {', '.join(sorted(prev_uses - results))}. Each `tool_use` "
                                 "block must have a corresponding `tool_result` block in the next message.")
            prev_uses = uses
        if uses_tools and not tools:
            return 400, _err("Requests which include `tool_use` or `tool_result` blocks must define tools.")
        return None

    def events(self, step, body):
        usage = step.get("usage", {"input": 10, "output": 5})
        evs = [("message_start", {"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "content": [], "model": body["model"],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage["input"], "output_tokens": 1}}})]
        idx = 0
        text = step.get("text", "")
        if text:
            evs.append(("content_block_start", {"type": "content_block_start", "index": idx,
                                                "content_block": {"type": "text", "text": ""}}))
            evs.append(("ping", {"type": "ping"}))
            for i in range(0, len(text), 4):
                evs.append(("content_block_delta", {"type": "content_block_delta", "index": idx,
                                                    "delta": {"type": "text_delta", "text": text[i:i + 4]}}))
            evs.append(("content_block_stop", {"type": "content_block_stop", "index": idx}))
            idx += 1
        for k, tc in enumerate(step.get("tool_calls") or []):
            tid = tc.get("id") or f"toolu_{k}fake{len(self.requests)}"
            evs.append(("content_block_start", {"type": "content_block_start", "index": idx, "content_block": {
                "type": "tool_use", "id": tid, "name": tc["name"], "input": {}}}))
            for frag in split_args(tc.get("arguments", "{}")):
                evs.append(("content_block_delta", {"type": "content_block_delta", "index": idx,
                                                    "delta": {"type": "input_json_delta", "partial_json": frag}}))
            evs.append(("content_block_stop", {"type": "content_block_stop", "index": idx}))
            idx += 1
        if step.get("stream_error"):
            evs = evs[:3] + [("error", {"type": "error", "error": {"type": step["stream_error"],
                                                                 "message": "Overloaded"}})]
            return evs
        evs.append(("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": "tool_use" if step.get("tool_calls") else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": usage["output"]}}))
        evs.append(("message_stop", {"type": "message_stop"}))
        return evs

    def default(self, body):
        last = body["messages"][-1]
        c = last["content"]
        if isinstance(c, str):
            return {"text": "echo: " + c}
        parts = []
        for b in c:
            if b["type"] == "text":
                parts.append("echo: " + b["text"])
            elif b["type"] == "tool_result":
                parts.append("result: " + json.dumps(b.get("content")))
        return {"text": "; ".join(parts)}
