"""fake_openai.py: a fake OpenAI chat completions server (POST /v1/chat/completions), as strict as the real one.

Validation (the real API's rules and its error messages, answered with its error JSON
{"error": {"message", "type", "param", "code"}}):
  - Authorization: Bearer KEY, else 401 invalid_api_key
  - model a string; messages a non-empty array; stream_options only with stream
  - roles system/developer/user/assistant/tool; user and system content a string or parts
  - an assistant message has content or tool_calls; each tool call {id, type: function, function: {name,
    arguments: string}}
  - every tool message answers a tool_call_id of the assistant message right before the run of tool messages
    it is in, once; an assistant message with tool_calls is followed at once by a tool message for each of
    its ids (anything else in between, or a missing answer, is refused)
  - tools: [{type: function, function: {name ^[a-zA-Z0-9_-]{1,64}$, parameters?: object}}]
See fake_http.py for the script of answers.
"""

import json
import re
import time

from fake_http import FakeAPI, split_args

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _err(message, param=None, code=None, etype="invalid_request_error"):
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


class FakeOpenAI(FakeAPI):
    name = "openai"
    path = "/v1/chat/completions"

    def error_json(self, status, message=None):
        if status == 429:
            return _err(message or "Rate limit reached for requests. Please try again in 2s.", None,
                        "rate_limit_exceeded", "requests")
        if status >= 500:
            return _err(message or "The server had an error while processing your request. Sorry about that!",
                        None, None, "server_error")
        if status == 401:
            return _err(message or "Incorrect API key provided.", None, "invalid_api_key")
        if status == 404:
            return _err(message or "The model does not exist or you do not have access to it.", None,
                        "model_not_found")
        return _err(message or "Bad request.")

    def validate(self, headers, body):
        auth = headers.get("Authorization") or headers.get("authorization")
        if self.key and auth != f"Bearer {self.key}":
            return 401, _err("Incorrect API key provided: " + (auth or "(none)")[7:][:8] + "****. You can find "
                             "your API key at https://platform.openai.com/account/api-keys.", None,
                             "invalid_api_key")
        if not isinstance(body, dict):
            return 400, _err("Invalid request body: expected an object.")
        if not isinstance(body.get("model"), str):
            return 400, _err("you must provide a model parameter", "model")
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return 400, _err("[] is too short - 'messages'", "messages", "empty_array")
        if "stream_options" in body and not body.get("stream"):
            return 400, _err("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                             "stream_options")
        for k in ("temperature", "top_p"):
            if k in body and not isinstance(body[k], (int, float)):
                return 400, _err(f"Invalid type for '{k}': expected a decimal.", k, "invalid_type")
        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list) or not tools:
                return 400, _err("[] is too short - 'tools'", "tools", "empty_array")
            for i, t in enumerate(tools):
                fn = t.get("function") if isinstance(t, dict) else None
                if t.get("type") != "function" or not isinstance(fn, dict):
                    return 400, _err(f"Missing required parameter: 'tools[{i}].function'.", f"tools[{i}].function")
                if not isinstance(fn.get("name"), str) or not NAME_RE.match(fn["name"]):
                    return 400, _err(f"Invalid 'tools[{i}].function.name': string does not match pattern. "
                                     "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                                     f"tools[{i}].function.name", "invalid_value")
                if "parameters" in fn and not isinstance(fn["parameters"], dict):
                    return 400, _err(f"Invalid type for 'tools[{i}].function.parameters'.",
                                     f"tools[{i}].function.parameters", "invalid_type")
        answered = set()
        waiting = []  # ids of the last assistant message still owed a tool message
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                return 400, _err(f"Invalid type for 'messages[{i}]': expected an object.", f"messages[{i}]")
            role = m.get("role")
            if role not in ("system", "developer", "user", "assistant", "tool"):
                return 400, _err(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                                 "'tool', and 'developer'.", f"messages[{i}].role", "invalid_value")
            if waiting and role != "tool":
                return 400, _err("An assistant message with 'tool_calls' must be followed by tool messages "
                                 "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                                 "response messages: " + ", ".join(waiting), f"messages.[{i}].role")
            c = m.get("content")
            if role in ("system", "developer", "user"):
                if not isinstance(c, (str, list)):
                    return 400, _err(f"Invalid type for 'messages[{i}].content': expected one of a string or "
                                     "array of objects.", f"messages[{i}].content", "invalid_type")
            elif role == "assistant":
                tcs = m.get("tool_calls")
                if c is None and not tcs:
                    return 400, _err(f"Invalid value for 'content': expected a string, got null.",
                                     f"messages.[{i}].content")
                if c is not None and not isinstance(c, (str, list)):
                    return 400, _err(f"Invalid type for 'messages[{i}].content'.", f"messages[{i}].content")
                if tcs is not None:
                    if not isinstance(tcs, list) or not tcs:
                        return 400, _err("[] is too short - 'messages.{i}.tool_calls'", f"messages[{i}].tool_calls")
                    for j, tc in enumerate(tcs):
                        fn = tc.get("function") if isinstance(tc, dict) else None
                        if not isinstance(tc.get("id"), str) or tc.get("type") != "function" or \
                                not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or \
                                not isinstance(fn.get("arguments"), str):
                            return 400, _err(f"Missing required parameter: 'messages[{i}].tool_calls[{j}]'.",
                                             f"messages[{i}].tool_calls[{j}]")
                    waiting = [tc["id"] for tc in tcs]
            else:  # tool
                tid = m.get("tool_call_id")
                if not isinstance(tid, str):
                    return 400, _err(f"Missing required parameter: 'messages[{i}].tool_call_id'.",
                                     f"messages[{i}].tool_call_id")
                if not isinstance(c, (str, list)):
                    return 400, _err(f"Invalid type for 'messages[{i}].content'.", f"messages[{i}].content")
                if tid not in waiting:
                    if tid in answered:
                        return 400, _err(f"Duplicate tool response for tool_call_id {tid}.",
                                         f"messages.[{i}].tool_call_id")
                    return 400, _err("Invalid parameter: messages with role 'tool' must be a response to a "
                                     "preceeding message with 'tool_calls'.", f"messages.[{i}].role")
                waiting.remove(tid)
                answered.add(tid)
        if waiting:
            return 400, _err("An assistant message with 'tool_calls' must be followed by tool messages responding "
                             "to each 'tool_call_id'. The following tool_call_ids did not have response "
                             "messages: " + ", ".join(waiting), f"messages.[{len(msgs)}].role")
        return None

    def events(self, step, body):
        model = body["model"]
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": model, "system_fingerprint": "fp_fake"}

        def chunk(delta, finish=None):
            return dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

        evs = [(None, chunk({"role": "assistant", "content": "", "refusal": None}))]
        text = step.get("text", "")
        # Text in pieces of up to 4 characters (UTF-8 of several bytes included).
        for i in range(0, len(text), 4):
            evs.append((None, chunk({"content": text[i:i + 4]})))
        calls = step.get("tool_calls") or []
        for k, tc in enumerate(calls):
            cid = tc.get("id") or f"call_{k}fake{len(self.requests)}"
            evs.append((None, chunk({"tool_calls": [{"index": k, "id": cid, "type": "function",
                                                     "function": {"name": tc["name"], "arguments": ""}}]})))
            for frag in split_args(tc.get("arguments", "{}")):
                evs.append((None, chunk({"tool_calls": [{"index": k, "function": {"arguments": frag}}]})))
        evs.append((None, chunk({}, "tool_calls" if calls else "stop")))
        usage = step.get("usage", {"input": 10, "output": 5})
        if (body.get("stream_options") or {}).get("include_usage"):
            evs.append((None, dict(base, choices=[], usage={
                "prompt_tokens": usage["input"], "completion_tokens": usage["output"],
                "total_tokens": usage["input"] + usage["output"]})))
        evs.append((None, "[DONE]"))
        return evs

    def default(self, body):
        last = body["messages"][-1]
        if last["role"] == "tool":
            return {"text": "results: " + ", ".join(m["content"] for m in body["messages"] if m["role"] == "tool")}
        c = last.get("content")
        return {"text": "echo: " + (c if isinstance(c, str) else json.dumps(c))}
