"""webutil.py: start the real agentd-web beside a harness Agentd for the web tests (docs/web.md).

    with Agentd(config=...) as a, AgentdWeb(a) as w:
        w.base          http://127.0.0.1:PORT (agentd-web picks a free port: --listen 127.0.0.1:0)
        w.link          the one-time login link it printed (None with --users: there are none)
        w.token         the access token (read from the 0600 file it created in agentd's data directory)
        w.get(path, headers={}, token=True) -> (status, headers, body bytes)   HTTP without a browser
        w.post(path, body, headers={}, token=False) -> (status, headers, body bytes)
        w.new_link()    SIGUSR1: agentd-web prints a new login link; returns it

On exit agentd-web gets SIGTERM and must exit 0 without a sanitizer report on its stderr.
"""
import os
import pathlib
import re
import signal
import subprocess
import urllib.error
import urllib.request

import harness
from harness import scaled, wait_for, sanitizer_reports

_BUILD = pathlib.Path(os.environ.get("AGENTD_BUILD_DIR") or harness.REPO / "build")
WEB_BIN = os.environ.get("AGENTD_WEB_BIN") or str(_BUILD / "agentd-web")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


class AgentdWeb:
    def __init__(self, agentd, args=(), env=None):
        self.a = agentd
        self.out_path = os.path.join(agentd.dir, "web.out")
        self.err_path = os.path.join(agentd.dir, "web.err")
        cmd = [WEB_BIN, "--socket", agentd.socket, "--data", agentd.data_dir, "--listen", "127.0.0.1:0", *args]
        e = dict(os.environ if env is None else env)
        if env is None:
            e.pop("AGENTD_WEB_TOKEN", None)
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=e, start_new_session=True,
                                         preexec_fn=harness._pdeathsig)
        m = wait_for(lambda: self._links() or ("no login links with --users" in self.output() and ["-"]), 10,
                     "agentd-web's login link")
        self.base = re.search(r"listening on (http://\S+)", self.output()).group(1)
        self.link = m[-1] if m != ["-"] else None
        token_file = os.path.join(agentd.data_dir, "web-token")
        self.token = e.get("AGENTD_WEB_TOKEN") or pathlib.Path(token_file).read_text().strip()

    def output(self):
        return pathlib.Path(self.out_path).read_text()

    def errors(self):
        return pathlib.Path(self.err_path).read_text()

    def _links(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"agentd-web exited {self.proc.returncode}: {self.errors()}")
        return re.findall(r"login link \(one use, within 10 minutes\): (http://\S+)", self.output())

    def new_link(self):
        n = len(self._links())
        self.proc.send_signal(signal.SIGUSR1)
        return wait_for(lambda: len(self._links()) > n and self._links()[-1], 10, "a new login link")

    def request(self, method, path, body=None, headers=None, token=False):
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + self.token
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.base + path, data=data, headers=h, method=method)
        try:
            with _opener.open(req, timeout=scaled(10)) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def get(self, path, headers=None, token=True):
        return self.request("GET", path, None, headers, token)

    def post(self, path, body, headers=None, token=False):
        return self.request("POST", path, body, headers, token)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=scaled(20))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("agentd-web did not stop on SIGTERM")
        assert self.proc.returncode == 0, (self.proc.returncode, self.errors())
        assert not sanitizer_reports(self.errors()), self.errors()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
        elif self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            print(f"--- agentd-web stderr:\n{self.errors()}", flush=True)
        return False
