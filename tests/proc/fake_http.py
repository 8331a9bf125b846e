"""fake_http.py: what the fake model APIs (fake_openai.py, fake_anthropic.py) share.

A fake runs a ThreadingHTTPServer on 127.0.0.1 in a thread of the test. Each POST is validated the way the real
service does (subclasses: validate(headers, body) -> None or (status, error JSON)) and recorded in .requests as
a Record (time.monotonic() at arrival, headers, body, the status answered). The answer comes from .script, a
list of steps consumed one per request (when it is empty, .default(body) makes one):

  {"status": 429, "retry_after": "2"}   an error status with the API's error JSON (retry_after: the header,
                                        or a function that makes it when the answer is sent)
  {"status": 400, "message": "..."}     the same, with that message
  {"text": "...", "tool_calls": [{"name", "arguments" (JSON text), "id"?}], "usage": {"input", "output"}}
                                        a streamed answer; options:
    "delay": s        wait before the headers
    "cut": n          send n SSE events, then close the connection mid-body (no terminating chunk)
    "hold": Event     send half the events, then wait for the Event (a test kills the worker meanwhile)
                      and close the connection
  {"json_body": {...}}                  200 with that JSON, not a stream (a server that ignores "stream")

Streams are HTTP/1.1 chunked, written with chunk boundaries at arbitrary places (splitting lines, CRLF
pairs and UTF-8 characters), CRLF line ends on odd events, comment lines (keep-alives), and JSON spread over
several data: lines on every third event: what a client's SSE parser must put back together.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Record:
    def __init__(self, t, path, headers, body, raw):
        self.t, self.path, self.headers, self.body, self.raw = t, path, headers, body, raw
        self.status = None


class FakeAPI:
    name = "fake"
    path = "/"

    def __init__(self, key="sk-test"):
        self.key = key
        self.requests = []
        self.script = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                fake._handle(self)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.srv.server_port}/v1"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- subclasses -------------------------------------------------------------------------------

    def validate(self, headers, body):
        return None

    def error_json(self, status, message):
        raise NotImplementedError

    def events(self, step, body):
        """The SSE events of a streamed answer: a list of (event type or None, JSON-able data or "[DONE]")."""
        raise NotImplementedError

    def default(self, body):
        return {"text": "ok"}

    # --- the exchange -----------------------------------------------------------------------------

    def _send_json(self, h, status, obj, extra=()):
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def _handle(self, h):
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        rec = Record(time.monotonic(), h.path, dict(h.headers.items()), body, raw)
        with self.lock:
            self.requests.append(rec)
        if h.path != self.path:
            rec.status = 404
            return self._send_json(h, 404, self.error_json(404, f"Invalid URL (POST {h.path})"))
        if body is None:
            rec.status = 400
            return self._send_json(h, 400, self.error_json(400, "We could not parse the JSON body of your "
                                                           "request."))
        bad = self.validate(rec.headers, body)
        if bad:
            rec.status = bad[0]
            return self._send_json(h, bad[0], bad[1])
        with self.lock:
            step = self.script.pop(0) if self.script else self.default(body)
        if step.get("delay"):
            time.sleep(step["delay"])
        status = step.get("status", 200)
        rec.status = status
        if "json_body" in step:  # a server that does not stream
            return self._send_json(h, 200, step["json_body"])
        if status != 200:
            ra = step.get("retry_after")
            extra = [("Retry-After", ra() if callable(ra) else ra)] if ra is not None else []
            return self._send_json(h, status, self.error_json(status, step.get("message")), extra)
        self._stream(h, step, body)

    def _stream(self, h, step, body):
        evs = self.events(step, body)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        parts = []
        for i, (etype, data) in enumerate(evs):
            nl = "\r\n" if i % 2 else "\n"
            s = ""
            if i % 4 == 1:
                s += ": keep-alive" + nl
            if etype:
                s += f"event: {etype}{nl}"
            if data == "[DONE]":
                s += "data: [DONE]" + nl
            elif i % 3 == 2:
                for line in json.dumps(data, indent=1, ensure_ascii=False).split("\n"):
                    s += "data: " + line + nl
            else:
                s += "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + nl
            parts.append((s + nl).encode())
        hold = step.get("hold")
        cut = step.get("cut")
        if hold is not None:
            cut = max(1, len(parts) // 2)
        out = parts if cut is None else parts[:cut]
        blob = b"".join(out)
        # Arbitrary chunk boundaries: 1, 2, 3, 5, 7, 11 ... bytes, cycling.
        sizes = [1, 2, 3, 5, 7, 11, 13, 17, 64, 300]
        pos, k = 0, 0
        try:
            while pos < len(blob):
                piece = blob[pos:pos + sizes[k % len(sizes)]]
                pos += len(piece)
                k += 1
                h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                if k % 7 == 0:
                    h.wfile.flush()
                    time.sleep(0.001)
            h.wfile.flush()
            if hold is not None:
                hold.wait(60)
            if cut is not None:
                h.close_connection = True
                return  # no terminating chunk: the body is cut
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True


def split_args(text, pieces=3):
    """A tool call's arguments JSON text as fragments, as the APIs stream them."""
    n = max(1, len(text) // pieces)
    return [text[i:i + n] for i in range(0, len(text), n)] or [""]
