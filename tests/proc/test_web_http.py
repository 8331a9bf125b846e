"""agentd-web over plain HTTP, without a browser (docs/web.md): the token file, login (form and one-time
link), every route refused without credentials, the CSRF checks on POST (Origin and the session's token),
Host checks, decisions recorded with who made them, server-sent events over watch, /metrics, and bad
start-up input; the conversation list's filters (metadata, status, model, updated-time range) with the cursor;
a conversation's runs (paged, streamed over watch as their own event type) and the nodes sharing the store
(two under AGENTD_TEST_STORE=pg)."""
import http.client
import json
import os
import re
import stat
import subprocess
import time
import urllib.parse

import harness
from harness import Agentd, wait_for, scaled
from webutil import AgentdWeb, WEB_BIN

TOOLS = """
[tool.approve]
executor = human
prompt = Pay it?
expires = 1h
"""


def pending(a, c):
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]


def ask(a, c, args='{"amount": 5}'):
    a.send(c, "/tool approve " + args)
    return wait_for(lambda: pending(a, c), 10, "a pending call")[0]["id"]


def login(w, name="Ann"):
    """Sign in through the form: the session cookie and the CSRF token."""
    body = urllib.parse.urlencode({"token": w.token, "name": name})
    st, h, _ = w.post("/login", body, {"Origin": w.base, "Content-Type": "application/x-www-form-urlencoded"})
    assert st == 303 and h["Location"] == "/", (st, dict(h))
    cookie = h["Set-Cookie"]
    assert re.fullmatch(r"agentd_web=[0-9a-f]{64}; Path=/; HttpOnly; SameSite=Strict", cookie), cookie
    ck = cookie.split(";")[0]
    st, _, b = w.get("/api/session", {"Cookie": ck}, token=False)
    assert st == 200, (st, b)
    s = json.loads(b)
    assert s["name"] == name and re.fullmatch(r"[0-9a-f]{64}", s["csrf"]), s
    return ck, s["csrf"]


def test_token_file_and_refusals():
    with Agentd() as a, AgentdWeb(a) as w:
        path = os.path.join(a.data_dir, "web-token")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert re.fullmatch(r"[0-9a-f]{64}", w.token), w.token
        assert "created the access token in" in w.errors(), w.errors()
        # nothing without credentials, whatever the route
        st, h, b = w.get("/", token=False)
        assert st == 401 and b'name="token"' in b and b"Sign in first" in b, (st, b[:200])
        assert "script-src 'self'" in h["Content-Security-Policy"] and "frame-ancestors 'none'" in h["Content-Security-Policy"]
        assert h["X-Content-Type-Options"] == "nosniff"
        for path_ in ["/app.js", "/api/pending", "/api/status", "/api/session", "/api/conversations",
                      "/api/watch?conversation=x", "/api/runs?conversation=x", "/api/nodes", "/api/search?q=x",
                      "/api/events?conversation=x", "/metrics", "/nope"]:
            st, _, b = w.get(path_, token=False)
            assert st == 401, (path_, st, b)
            st, _, b = w.get(path_, {"Authorization": "Bearer " + "0" * 64}, token=False)
            assert st == 401, (path_, st, b)
            st, _, b = w.get(path_, {"Cookie": "agentd_web=" + "0" * 64}, token=False)
            assert st == 401, (path_, st, b)
        for path_ in ["/api/resolve", "/api/send", "/api/cancel", "/api/resume", "/api/fork", "/api/end"]:
            st, _, b = w.post(path_, "{}", {"Origin": w.base})
            assert st == 401, (path_, st, b)
        # the login form: a wrong token, a foreign origin
        form = {"Origin": w.base, "Content-Type": "application/x-www-form-urlencoded"}
        st, h, b = w.post("/login", "token=wrong&name=x", form)
        assert st == 403 and b"Wrong token." in b and "Set-Cookie" not in h, (st, b)
        st, h, b = w.post("/login", "token=" + w.token, dict(form, Origin="http://evil.example"))
        assert st == 403 and "Set-Cookie" not in h, (st, b)
        st, h, b = w.post("/login", urllib.parse.urlencode({"token": w.token, "name": "a\nb"}), form)
        assert st == 400 and "Set-Cookie" not in h, (st, b)
        # another Host (a name rebound to 127.0.0.1) is refused even with the token
        st, _, b = w.get("/api/status", {"Host": "evil.example"})
        assert st == 403 and b"Host" in b, (st, b)
        st, _, _ = w.get("/api/status", {"Host": "localhost:" + w.base.rsplit(":", 1)[1]})
        assert st == 200
        # other methods
        assert w.request("PUT", "/api/status", "x", token=True)[0] == 405


def test_login_link_is_one_use():
    with Agentd() as a, AgentdWeb(a) as w:
        path = w.link[len(w.base):]
        st, h, b = w.get(path, token=False)
        assert st == 200 and "HttpOnly; SameSite=Strict" in h["Set-Cookie"] and b"Signed in" in b, (st, b)
        ck = h["Set-Cookie"].split(";")[0]
        assert w.get("/api/status", {"Cookie": ck}, token=False)[0] == 200
        st, h, b = w.get(path, token=False)
        assert st == 403 and b"used already or has expired" in b and "Set-Cookie" not in h, (st, b)
        assert w.get("/login?once=" + "a" * 64, token=False)[0] == 403
        new = w.new_link()
        assert new != w.link
        assert w.get(new[len(w.base):], token=False)[0] == 200
        # signing out ends the session
        st, _, csrf = w.get("/api/session", {"Cookie": ck}, token=False)
        csrf = json.loads(csrf)["csrf"]
        st, h, _ = w.post("/logout", "{}", {"Cookie": ck, "Origin": w.base, "X-CSRF-Token": csrf})
        assert st == 200 and "Max-Age=0" in h["Set-Cookie"], (st, dict(h))
        assert w.get("/api/status", {"Cookie": ck}, token=False)[0] == 401


def test_csrf_and_who_decided():
    with Agentd(config=TOOLS) as a, AgentdWeb(a) as w:
        c = a.ok({"op": "create", "settings": {"model": "echo", "tools": ["approve"]}})["conversation"]
        tc = ask(a, c)
        ck, csrf = login(w, "Ann <ops>")
        body = json.dumps({"tool_call_id": tc, "decision": "approve", "comment": "fine"})
        good = {"Cookie": ck, "Origin": w.base, "X-CSRF-Token": csrf, "Content-Type": "application/json"}
        for bad in [dict(good, **{"X-CSRF-Token": "0" * 64}), {k: v for k, v in good.items() if k != "X-CSRF-Token"},
                    dict(good, Origin="http://evil.example"), {k: v for k, v in good.items() if k != "Origin"},
                    dict(good, Origin="null")]:
            st, _, b = w.post("/api/resolve", body, bad)
            assert st == 403, (bad, st, b)
        assert pending(a, c)[0]["id"] == tc  # nothing decided
        st, _, b = w.post("/api/resolve", body, good)
        assert st == 200, (st, b)
        seq = json.loads(b)["seq"]
        res = [e for e in a.events(c) if e["seq"] == seq][0]
        assert res["content"] == {"tool_call_id": tc, "status": "resolved", "result": {"approved": True, "comment": "fine"},
                                  "by": {"uid": os.getuid(), "name": "Ann <ops>"}}, res
        # twice: stale, said as such
        st, _, b = w.post("/api/resolve", body, good)
        assert st == 409 and json.loads(b)["error"] == "stale", (st, b)
        # deny, with a result; a program with the token needs no CSRF token
        tc = ask(a, c)
        st, _, b = w.post("/api/resolve", json.dumps({"tool_call_id": tc, "decision": "deny", "result": {"why": "no"}}),
                          token=True)
        assert st == 200, (st, b)
        res = [e for e in a.events(c) if e["seq"] == json.loads(b)["seq"]][0]["content"]
        assert res["status"] == "resolved" and res["result"] == {"why": "no"} and res["by"] == {
            "uid": os.getuid(), "name": "agentd-web (token)"}, res
        # bad bodies: a clear 400, nothing decided
        tc = ask(a, c)
        for b_ in ["nope", "[]", json.dumps({"tool_call_id": tc}), json.dumps({"tool_call_id": tc, "decision": "maybe"}),
                   json.dumps({"tool_call_id": tc, "decision": "approve", "comment": "x", "result": 1}),
                   json.dumps({"tool_call_id": tc, "decision": "approve", "extra": 1})]:
            st, _, b = w.post("/api/resolve", b_, good)
            assert st == 400 and json.loads(b)["error"] == "bad_request", (b_, st, b)
        st, _, b = w.post("/api/resolve", json.dumps({"tool_call_id": "bad id!", "decision": "approve"}), good)
        assert st == 400 and "tool_call_id" in json.loads(b)["message"], (st, b)
        st, _, b = w.post("/api/resolve", "x" * (300 << 10), good)
        assert st == 413, st
        assert pending(a, c)[0]["id"] == tc
        # the name can be changed (and must be printable)
        st, _, b = w.post("/api/session", json.dumps({"name": "Bo"}), good)
        assert st == 200, (st, b)
        st, _, b = w.post("/api/session", json.dumps({"name": "x\u0007"}), good)
        assert st == 400, (st, b)
        st, _, b = w.post("/api/resolve", json.dumps({"tool_call_id": tc, "decision": "approve"}), good)
        res = [e for e in a.events(c) if e["seq"] == json.loads(b)["seq"]][0]["content"]
        assert res["by"]["name"] == "Bo" and res["result"] == {"approved": True}, res


def test_behind_a_proxy():
    """--origin, --secure-cookie and --user-header, as behind the nginx of docs/web.md."""
    with Agentd(config=TOOLS) as a, AgentdWeb(a, ["--origin", "https://approvals.example.com", "--secure-cookie",
                                                  "--user-header", "X-Remote-User"]) as w:
        proxy = {"Host": "approvals.example.com", "Origin": "https://approvals.example.com"}
        st, h, _ = w.post("/login", urllib.parse.urlencode({"token": w.token}),
                          dict(proxy, **{"Content-Type": "application/x-www-form-urlencoded"}))
        assert st == 303 and h["Set-Cookie"].endswith("; HttpOnly; SameSite=Strict; Secure"), (st, dict(h))
        ck = h["Set-Cookie"].split(";")[0]
        st, _, b = w.get("/api/session", dict(proxy, Cookie=ck, **{"X-Remote-User": "bob"}), token=False)
        s = json.loads(b)
        assert st == 200 and s["by"] == "bob" and s["name_from_proxy"] is True, s
        c = a.ok({"op": "create", "settings": {"model": "echo", "tools": ["approve"]}})["conversation"]
        tc = ask(a, c)
        good = dict(proxy, Cookie=ck, **{"X-CSRF-Token": s["csrf"], "X-Remote-User": "bob"})
        st, _, b = w.post("/api/resolve", json.dumps({"tool_call_id": tc, "decision": "approve"}),
                          dict(good, Origin="http://127.0.0.1:8080"))
        assert st == 403, (st, b)  # not an origin this agentd-web serves
        st, _, b = w.post("/api/resolve", json.dumps({"tool_call_id": tc, "decision": "approve"}), good)
        assert st == 200, (st, b)
        res = [e for e in a.events(c) if e["seq"] == json.loads(b)["seq"]][0]["content"]
        assert res["by"] == {"uid": os.getuid(), "name": "bob"}, res
        # another Host than the origins': refused
        assert w.get("/api/status", {"Host": "other.example.com"})[0] == 403


def test_pending_list_and_routes():
    with Agentd(config=TOOLS) as a, AgentdWeb(a) as w:
        st, _, b = w.get("/api/pending")
        assert st == 200 and json.loads(b)["pending"] == [], b
        cs = [a.ok({"op": "create", "conversation": f"p{i}", "settings": {"model": "echo", "tools": ["approve"]}})["conversation"]
              for i in range(3)]
        ids = [ask(a, c, json.dumps({"n": i})) for i, c in enumerate(cs)]
        r = json.loads(w.get("/api/pending")[2])
        assert sorted(t["id"] for t in r["pending"]) == sorted(ids), r
        assert {t["conversation"] for t in r["pending"]} == set(cs) and all(t["prompt"] == "Pay it?" for t in r["pending"])
        a.ctl("resolve", ids[1])
        r = json.loads(w.get("/api/pending")[2])
        assert sorted(t["id"] for t in r["pending"]) == sorted([ids[0], ids[2]]), r
        r = json.loads(w.get("/api/conversations?status=suspended")[2])
        assert [c["id"] for c in r["conversations"]] == ["p0", "p2"], r
        r = json.loads(w.get("/api/conversations?limit=1")[2])
        assert len(r["conversations"]) == 1 and r["next"] == "p0", r
        st, _, b = w.get("/api/conversations?status=sleepy")
        assert st == 400 and "status" in json.loads(b)["message"], b
        assert w.get("/api/conversations?limit=0")[0] == 400
        assert w.get("/api/conversation?id=nope")[0] == 404
        assert json.loads(w.get("/api/conversation?id=p1")[2])["conversation"]["id"] == "p1"
        r = json.loads(w.get("/api/events?conversation=p1")[2])
        assert [e["type"] for e in r["events"]][:4] == ["user_msg", "assistant_msg", "tool_call", "suspension"], r
        assert json.loads(w.get("/api/tool_calls?conversation=p0")[2])["tool_calls"][0]["id"] == ids[0]
        assert json.loads(w.get("/api/tool_call?id=" + ids[1])[2])["tool_call"]["status"] == "resolved"
        assert "workers" in json.loads(w.get("/api/status")[2])
        st, h, b = w.get("/app.js")
        assert st == 200 and h["Content-Type"].startswith("text/javascript") and not re.search(rb"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", b)
        st, h, b = w.get("/")
        assert st == 200 and b'<script src="/app.js"' in b


def test_unknown_calls_listed_and_settled():
    """A call whose outcome is unknown is listed beside the approvals (kind "unknown") and settled through
    POST /api/settle, recorded with who decided; bad bodies are refused and nothing is written."""
    a = Agentd(start=False)
    tool = a.script("side.py", "import json, os, sys, time\nreq = json.load(sys.stdin)\n"
                    "open(sys.argv[1], 'a').write(req['tool_call_id'] + '\\n')\n"
                    "while not os.path.exists(sys.argv[1] + '.go'):\n    time.sleep(0.01)\nprint('{}')\n")
    eff = os.path.join(a.dir, "effects")
    a.write_config(TOOLS + f"\n[tool.side]\nexecutor = server\ncommand = python3 {tool} {eff}\ntimeout = 60s\n")
    a.start()
    with a, AgentdWeb(a) as w:
        c = a.ok({"op": "create", "settings": {"model": "echo", "tools": ["approve", "side"]}})["conversation"]
        ap = ask(a, c)
        c2 = a.ok({"op": "create", "settings": {"model": "echo", "tools": ["side"]}})["conversation"]
        a.send(c2, "/tool side {}")
        wait_for(lambda: os.path.exists(eff), 20, "the side effect")
        pid = a.worker_pid(c2)
        os.kill(pid, 9)
        unk = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c2, "status": "unknown"})["tool_calls"], 20,
                       "the unknown call")[0]["id"]
        wait_for(lambda: a.ok({"op": "get", "conversation": c2})["conversation"]["status"] == "suspended", 20,
                 "suspended")
        r = json.loads(w.get("/api/pending")[2])
        kinds = {t["id"]: t["kind"] for t in r["pending"]}
        assert kinds == {ap: "approval", unk: "unknown"}, r
        ck, csrf = login(w, "Ann")
        good = {"Cookie": ck, "Origin": w.base, "X-CSRF-Token": csrf, "Content-Type": "application/json"}
        n = len(a.events(c2))
        for body, code in [({"tool_call_id": unk, "outcome": "done"}, 400),
                           ({"conversation": c2, "tool_call_id": unk, "outcome": "maybe"}, 400),
                           ({"conversation": c2, "tool_call_id": unk, "outcome": "done", "x": 1}, 400),
                           ({"conversation": c2, "tool_call_id": ap, "outcome": "done"}, 404)]:
            st, _, b = w.post("/api/settle", json.dumps(body), good)
            assert st == code, (body, st, b)
        st, _, b = w.post("/api/settle", json.dumps({"conversation": c2, "tool_call_id": unk, "outcome": "done"}),
                          dict(good, **{"X-CSRF-Token": "0" * 64}))
        assert st == 403, (st, b)
        assert len(a.events(c2)) == n
        st, _, b = w.post("/api/settle", json.dumps({"conversation": c2, "tool_call_id": unk, "outcome": "done",
                                                    "result": {"sent": True}}), good)
        assert st == 200, (st, b)
        ev = [e for e in a.events(c2) if e["seq"] == json.loads(b)["seq"]][0]
        assert ev["content"]["result"] == {"sent": True} and ev["content"]["by"]["name"] == "Ann", ev
        st, _, b = w.post("/api/settle", json.dumps({"conversation": c2, "tool_call_id": unk, "outcome": "done"}), good)
        assert st == 409 and json.loads(b)["error"] == "stale", (st, b)
        r = json.loads(w.get("/api/pending")[2])
        assert [t["id"] for t in r["pending"]] == [ap], r
        open(eff + ".go", "w").close()


XSS_KEY = "<script>window.__pwned=1</script>"
XSS_VAL = '<img src=x onerror="window.__pwned=2">'


def listed(w, query):
    """/api/conversations?query: (status, ids, next, body)."""
    st, h, b = w.get("/api/conversations?" + query)
    r = json.loads(b)
    assert h["Content-Type"] == "application/json", dict(h)
    if st != 200:
        return st, None, None, r
    return st, [c["id"] for c in r["conversations"]], r.get("next"), r


def test_conversation_list_filters():
    with Agentd(config="[model.other]\ncommand = python3 -c 'print(1)'\n") as a, AgentdWeb(a) as w:
        for i in range(9):
            a.create(model="other" if i in (2, 7) else "echo", conversation=f"m{i}",
                     metadata={"team": "red" if i % 2 else "blue", "env": "prod" if i < 6 else "dev"})
        a.create(conversation="x1", metadata={XSS_KEY: XSS_VAL, "q": "a=b&c+d ü?#", "empty": ""})
        a.create(conversation="z0")
        a.ok({"op": "update", "conversation": "m3", "status": "ended"})
        q = urllib.parse.urlencode
        # metadata: one pair, two pairs (all must hold), with status and model
        assert listed(w, "meta.team=red")[1:3] == (["m1", "m3", "m5", "m7"], None)
        assert listed(w, "meta.team=red&meta.env=prod")[1:3] == (["m1", "m3", "m5"], None)
        assert listed(w, "meta.team=red&status=ended")[1] == ["m3"]
        assert listed(w, "meta.team=red&status=idle&meta.env=dev")[1] == ["m7"]
        assert listed(w, "model=other")[1] == ["m2", "m7"]
        assert listed(w, "model=other&meta.env=dev")[1] == ["m7"]
        assert listed(w, "meta.team=green")[1:3] == ([], None)
        st, got, _, r = listed(w, "meta.team=red")
        assert r["conversations"][0]["metadata"] == {"team": "red", "env": "prod"}, r
        # any key and value, exactly: markup, '=', '&', '+', '?', '#', non-ASCII, the empty value
        st, got, _, r = listed(w, q({"meta." + XSS_KEY: XSS_VAL, "meta.q": "a=b&c+d ü?#"}))
        assert got == ["x1"] and r["conversations"][0]["metadata"][XSS_KEY] == XSS_VAL, r
        assert listed(w, "meta.empty=")[1] == ["x1"] and listed(w, "meta.empty")[1] == ["x1"]
        assert listed(w, q({"meta.q": "a=b&c+d"}))[1] == []
        # paging through the cursor keeps the filter
        pages, after = [], None
        while True:
            st, got, after, _ = listed(w, "meta.team=red&limit=3" + (f"&after={after}" if after else ""))
            assert st == 200
            pages.append(got)
            if not after:
                break
        assert pages == [["m1", "m3", "m5"], ["m7"]], pages
        pages, after = [], None
        while True:
            st, got, after, _ = listed(w, "meta.env=prod&limit=2" + (f"&after={after}" if after else ""))
            pages.append(got)
            if not after:
                break
        assert pages == [["m0", "m1"], ["m2", "m3"], ["m4", "m5"]], pages
        # updated-time range (exclusive bounds): two updated after everything else was
        t = max(c["updated_at"] for c in a.ok({"op": "list"})["conversations"])
        wait_for(lambda: time.time() * 1000 > t + 2, 5, "the clock to move on")
        a.ok({"op": "update", "conversation": "m4", "metadata": {"seen": "yes"}})
        a.ok({"op": "update", "conversation": "m8", "metadata": {"seen": "yes"}})
        assert listed(w, f"updated_after={t}")[1] == ["m4", "m8"]
        late = {c["id"]: c["updated_at"] for c in json.loads(w.get(f"/api/conversations?updated_after={t}")[2])["conversations"]}
        assert listed(w, f"updated_after={t}&updated_before={late['m8']}")[1] == (["m4"] if late["m4"] < late["m8"] else [])
        assert listed(w, f"updated_before={t + 1}&meta.team=blue&meta.env=dev")[1] == ["m6"]
        assert listed(w, f"updated_after={t}&meta.team=red")[1] == []
        # a bad filter: 400 bad_request with a message that says what is wrong; agentd's own where it checks
        bad = [
            ("meta.k=" + "v" * 257, "'metadata.k' is longer than 256 bytes"),
            ("meta.=v", "'metadata' keys must be 1-64 bytes"),
            ("meta." + "k" * 65 + "=v", "'metadata' keys must be 1-64 bytes"),
            ("&".join(f"meta.k{i}=v" for i in range(17)), "'metadata' has 17 keys (at most 16)"),
            ("meta.team=red&meta.team=blue", "a metadata key is given twice"),
            ("meta.k=a%00b", "must not contain a NUL character"),
            ("meta.k%00x=v", "must not contain a NUL character"),
            ("meta.k=%ff", "not valid UTF-8"),
            ("meta.%ff=v", "not valid UTF-8"),
            ("model=%ff", "not valid UTF-8"),
            ("model=" + "m" * 129, "'model' must be a model name"),
            ("status=sleepy", "status"),
            ("updated_after=yesterday", "'updated_after' and 'updated_before' are times in milliseconds"),
            ("updated_before=-5", "'updated_after' and 'updated_before' are times in milliseconds"),
            ("updated_before=0", "updated_before"),
            ("after=no%20such%20id", "after"),
        ]
        for query, msg in bad:
            st, _, _, r = listed(w, query)
            assert st == 400 and r["error"] == "bad_request" and msg in r["message"], (query, st, r)
        # a filter on agentd's full 16 pairs is fine
        assert listed(w, "&".join(f"meta.k{i}=v" for i in range(16)))[0:2] == (200, [])


def test_metrics():
    with Agentd() as a, AgentdWeb(a) as w:
        st, h, b = w.get("/metrics")
        assert st == 200 and h["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8", (st, dict(h))
        assert re.search(rb'^agentd_ops_total\{op="metrics"\} \d+$', b, re.M), b[:400]
        assert b"# TYPE agentd_workers_live gauge" in b
        st, _, b = w.get("/metrics", token=False)
        assert st == 401 and b.startswith(b"401 unauthorized"), b


def test_server_sent_events_follow_watch():
    with Agentd(config=TOOLS) as a, AgentdWeb(a) as w:
        c = a.ok({"op": "create", "settings": {"model": "echo", "tools": ["approve"]}})["conversation"]
        a.send(c, "one")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the first answer")
        hc = http.client.HTTPConnection(w.base[len("http://"):], timeout=scaled(10))
        hc.request("GET", f"/api/watch?conversation={c}&after=1", headers={"Authorization": "Bearer " + w.token})
        r = hc.getresponse()
        assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream", r.status
        msgs = []

        def read_msg():
            lines = []
            while True:
                line = r.readline()
                assert line, "the stream ended"
                line = line.decode().rstrip("\n")
                if line == "":
                    return lines
                lines.append(line)

        first = read_msg()
        assert first[-2:] == ["event: ready", 'data: {"last_seq":2}'], first
        m = read_msg()
        assert m[:2] == ["id: 2", "event: event"] and json.loads(m[2][6:])["type"] == "assistant_msg", m
        a.send(c, "<two>")
        for want in ("user_msg", "assistant_msg"):
            m = read_msg()
            msgs.append(m)
            assert m[1] == "event: event" and json.loads(m[2][6:])["type"] == want, m
        assert json.loads(msgs[1][2][6:])["content"]["text"] == "echo: <two>"
        # Last-Event-ID (an EventSource reconnecting) wins over after
        hc2 = http.client.HTTPConnection(w.base[len("http://"):], timeout=scaled(10))
        hc2.request("GET", f"/api/watch?conversation={c}&after=0",
                    headers={"Authorization": "Bearer " + w.token, "Last-Event-ID": "3"})
        r2 = hc2.getresponse()
        head = b""
        while b"id: " not in head:
            head += r2.readline()
        assert head.endswith(b"id: 4\n"), head
        hc2.close()
        # the conversation goes: the stream says so and ends
        a.ok({"op": "delete", "conversation": c})
        assert read_msg()[:1] == ["event: end"]
        assert r.readline() == b""
        hc.close()
        # an unknown conversation is 404
        st, _, b = w.get("/api/watch?conversation=nope")
        assert st == 404 and json.loads(b)["error"] == "not_found", (st, b)


class Sse:
    """An /api/watch stream read message by message: each a list of its lines."""

    def __init__(self, w, query, headers=None):
        self.hc = http.client.HTTPConnection(w.base[len("http://"):], timeout=scaled(10))
        self.hc.request("GET", "/api/watch?" + query, headers={"Authorization": "Bearer " + w.token, **(headers or {})})
        self.r = self.hc.getresponse()
        assert self.r.status == 200 and self.r.getheader("Content-Type") == "text/event-stream", self.r.status

    def next(self):
        lines = []
        while True:
            line = self.r.readline()
            assert line, "the stream ended"
            line = line.decode().rstrip("\n")
            if line == "":
                if lines and not all(x.startswith(":") for x in lines):  # keepalive comments are not messages
                    return lines
                lines = []
                continue
            lines.append(line)

    def close(self):
        self.hc.close()


def sse_kind(m):
    """(event type, its data parsed) of an SSE message."""
    ev = next(x[len("event: "):] for x in m if x.startswith("event: "))
    return ev, json.loads(next(x[len("data: "):] for x in m if x.startswith("data: ")))


def runs_of(w, query):
    st, h, b = w.get("/api/runs?" + query)
    assert h["Content-Type"] == "application/json", dict(h)
    return st, json.loads(b)


def test_runs_paged_with_bad_input_refused():
    """/api/runs is the runs op: newest first, `limit` a page, `before` the cursor; by token or session (a GET:
    no CSRF token needed); every bad parameter a 400 that names it, an unknown conversation 404."""
    with Agentd() as a, AgentdWeb(a) as w:
        c = a.ok({"op": "create", "settings": {"model": "echo"}})["conversation"]
        st, r = runs_of(w, "conversation=" + c)
        assert st == 200 and r == {"runs": []}, r
        for i in range(3):
            a.send(c, f"m{i}")
            wait_for(lambda: len(a.events(c)) == 2 * (i + 1), 10, f"answer {i}")
        st, r = runs_of(w, "conversation=" + c)
        assert st == 200 and "next" not in r, r
        assert [(x["id"], x["status"], x["attempt"], x["model"]) for x in r["runs"]] == \
            [(3, "completed", 1, "echo"), (2, "completed", 1, "echo"), (1, "completed", 1, "echo")], r
        assert r["runs"] == a.ok({"op": "runs", "conversation": c})["runs"]  # as agentd says, nothing added
        assert all(x["ended_at"] >= x["started_at"] > 0 for x in r["runs"]), r
        st, r = runs_of(w, f"conversation={c}&limit=2")
        assert [x["id"] for x in r["runs"]] == [3, 2] and r["next"] == 2, r
        st, r = runs_of(w, f"conversation={c}&limit=2&before=2")
        assert [x["id"] for x in r["runs"]] == [1] and "next" not in r, r
        st, r = runs_of(w, f"conversation={c}&before=1")
        assert st == 200 and r == {"runs": []}, r
        # a session cookie reads it too
        ck, _ = login(w)
        st, _, b = w.get("/api/runs?conversation=" + c, {"Cookie": ck}, token=False)
        assert st == 200 and [x["id"] for x in json.loads(b)["runs"]] == [3, 2, 1], (st, b)
        # bad input: a 400 naming what is wrong
        for q, says in [("", "'conversation' is required"), ("conversation=", "'conversation' is required"),
                        ("limit=5", "'conversation' is required"),
                        ("conversation=%FF", "'conversation' is not valid UTF-8"),
                        (f"conversation={c}&limit=0", "'limit' must be a number from 1 to 1000"),
                        (f"conversation={c}&limit=1001", "'limit' must be a number from 1 to 1000"),
                        (f"conversation={c}&limit=ten", "'limit' must be a number from 1 to 1000"),
                        (f"conversation={c}&limit=-1", "'limit' must be a number from 1 to 1000"),
                        (f"conversation={c}&before=0", "'before' must be a run id"),
                        (f"conversation={c}&before=-2", "'before' must be a run id"),
                        (f"conversation={c}&before=2x", "'before' must be a run id"),
                        (f"conversation={c}&before=99999999999999999999", "'before' must be a run id")]:
            st, r = runs_of(w, q)
            assert st == 400 and r["error"] == "bad_request" and r["message"].startswith(says), (q, st, r)
        # agentd's own checks come through with its message
        st, r = runs_of(w, "conversation=" + urllib.parse.quote("bad id!"))
        assert st == 400 and r["error"] == "bad_request" and "conversation" in r["message"], r
        st, r = runs_of(w, "conversation=nope")
        assert st == 404 and r["error"] == "not_found", r
        # nothing changed meanwhile
        assert [x["id"] for x in a.ok({"op": "runs", "conversation": c})["runs"]] == [3, 2, 1]


def test_runs_stream_over_watch():
    """With runs=1 the stream carries each run's start and end as `run` messages (no id: Last-Event-ID stays
    an event seq), the end after the events that end it; without it, none; runs must be 0 or 1."""
    with Agentd(start=False) as a:
        gate = a.gated_model()
        a.start()
        with AgentdWeb(a) as w:
            c = a.ok({"op": "create", "settings": {"model": "gated"}})["conversation"]
            plain = Sse(w, f"conversation={c}")
            s = Sse(w, f"conversation={c}&runs=1")
            assert sse_kind(s.next()) == ("ready", {"last_seq": 0})
            assert sse_kind(plain.next()) == ("ready", {"last_seq": 0})
            a.send(c, "hi")
            m = s.next()
            assert sse_kind(m) == ("event", sse_kind(m)[1]) and sse_kind(m)[1]["type"] == "user_msg", m
            m = s.next()
            kind, run = sse_kind(m)
            assert kind == "run" and not any(x.startswith("id:") for x in m), m
            assert (run["id"], run["status"], run["attempt"], run["ended_at"]) == (1, "running", 1, None), run
            open(gate, "w").close()
            m = s.next()
            assert sse_kind(m)[0] == "event" and sse_kind(m)[1]["type"] == "assistant_msg" and m[0] == "id: 2", m
            kind, run = sse_kind(s.next())
            assert kind == "run" and (run["id"], run["status"], run["first_seq"], run["last_seq"]) == \
                (1, "completed", 2, 2), run
            # the stream without runs: the same events, and no run between them
            a.send(c, "again")
            seen = []
            while len([k for k in seen if k == ("event", "assistant_msg")]) < 2:
                k, d = sse_kind(plain.next())
                seen.append((k, d.get("type")))
            assert ("run", None) not in seen and seen[0] == ("event", "user_msg"), seen
            kinds = []
            while ("run", "completed") not in kinds:
                k, d = sse_kind(s.next())
                kinds.append((k, d.get("type") if k == "event" else d["status"]))
            assert kinds[-2:] == [("event", "assistant_msg"), ("run", "completed")], kinds
            s.close()
            plain.close()
            for q in ("runs=2", "runs=yes", "runs=-1", "after=1&runs=x"):
                st, _, b = w.get(f"/api/watch?conversation={c}&{q}")
                assert st == 400 and json.loads(b)["message"].startswith("'runs' is 1"), (q, st, b)
            st, _, b = w.get(f"/api/watch?conversation={c}&after=x&runs=1")
            assert st == 400 and json.loads(b)["message"].startswith("'after' is a seq"), (st, b)


def test_ids_not_utf8_or_missing_are_refused():
    """An id in the query that is missing, or not UTF-8 (a JSON request to agentd cannot carry it): 400 naming
    the parameter, on every route that takes one."""
    with Agentd() as a, AgentdWeb(a) as w:
        for route, name in [("/api/conversation", "id"), ("/api/tool_call", "id"), ("/api/tool_calls", "conversation"),
                            ("/api/audit", "conversation"), ("/api/events", "conversation"),
                            ("/api/watch", "conversation"), ("/api/runs", "conversation")]:
            for q, says in [("", f"'{name}' is required"), (f"{name}=", f"'{name}' is required"),
                            (f"{name}=%FF%FE", f"'{name}' is not valid UTF-8"),
                            (f"{name}=a%C3", f"'{name}' is not valid UTF-8")]:
                st, h, b = w.get(f"{route}?{q}")
                r = json.loads(b)
                assert (st, r["error"], r["message"]) == (400, "bad_request", says), (route, q, st, r)
        assert a.ok({"op": "list"})["conversations"] == []


class SecondNode(Agentd):
    """Another node on the first one's PostgreSQL store, with a run directory of its own."""

    def __init__(self, first, config):
        self.target = harness.pg_target(first.data_dir)
        super().__init__(config=config, start=False)

    def command(self):
        return [harness.AGENTD_BIN, "--store", self.target, "--run-dir", self.dir, "--socket", self.socket,
                "--config", self.config_path]


NODE = "[agentd]\nnode_id = {}\nlease_time = 1s\nheartbeat = 200ms\n"


def nodes_of(w):
    st, h, b = w.get("/api/nodes")
    assert st == 200 and h["Content-Type"] == "application/json", (st, b)
    return json.loads(b)


def test_nodes():
    """/api/nodes is the nodes op with agentd-web's clock (`now`) added; /api/status names the node. One node
    on its store lists itself; under AGENTD_TEST_STORE=pg a second node on the same store is listed live
    beside it, then expired once it is killed and its lease runs out."""
    with Agentd(config=NODE.format("alpha")) as a, AgentdWeb(a) as w:
        t0 = time.time() * 1000
        r = nodes_of(w)
        assert r["node"] == "alpha" and r["lease_ms"] == 1000 and r["heartbeat_ms"] == 200, r
        assert abs(r["now"] - t0) < scaled(10) * 1000, r
        assert [(n["node"], n["live"], n["self"]) for n in r["nodes"]] == [("alpha", True, True)], r
        assert r["now"] >= r["nodes"][0]["beat_at"] - 1000, r
        st = json.loads(w.get("/api/status")[2])["node"]
        assert st["id"] == "alpha" and st["other_nodes"] == 0, st
        if not harness.PG:
            return
        b = SecondNode(a, NODE.format("beta"))
        with b:
            b.start()
            r = wait_for(lambda: (lambda r: len(r["nodes"]) == 2 and r)(nodes_of(w)), 10, "beta listed")
            assert [(n["node"], n["live"], n["self"]) for n in r["nodes"]] == \
                [("alpha", True, True), ("beta", True, False)], r
            wait_for(lambda: json.loads(w.get("/api/status")[2])["node"]["other_nodes_live"] == 1, 10,
                     "alpha's status counting beta")
            b.kill()
            r = wait_for(lambda: (lambda r: not r["nodes"][1]["live"] and r)(nodes_of(w)), 10, "beta expired")
            assert [(n["node"], n["live"]) for n in r["nodes"]] == [("alpha", True), ("beta", False)], r
            assert r["now"] > r["nodes"][1]["expires_at"] - 1000, r


def act(w, path, body, hdrs):
    st, _, b = w.post(path, body if isinstance(body, str) else json.dumps(body), hdrs)
    return st, json.loads(b)


def meta(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]["metadata"]


def test_events_filtered_and_paged():
    """/api/events: the type filter, the after/before range, the limit, forward pages, and every bad input a 400
    naming it."""
    with Agentd(config=TOOLS) as a, AgentdWeb(a) as w:
        c = a.create(settings={"model": "echo", "tools": ["approve"]})
        a.send(c, "hello there")
        tc = ask(a, c)
        everything = a.events(c)
        ev = lambda q: (lambda r: (r[0], json.loads(r[2])))(w.get(f"/api/events?conversation={c}&" + q))
        st, r = ev("type=user_msg")
        assert st == 200 and [e["seq"] for e in r["events"]] == [e["seq"] for e in everything if e["type"] == "user_msg"], r
        st, r = ev("type=tool_call&limit=1")
        call = r["events"][0]
        assert len(r["events"]) == 1 and call["content"]["tool_call_id"] == tc, r
        st, r = ev(f"type=user_msg&before={call['seq']}&limit=1")
        assert [e["content"] for e in r["events"]] == [{"text": "/tool approve " + '{"amount": 5}'}], r
        st, r = ev("after=1&before=4")
        assert [e["seq"] for e in r["events"]] == [2, 3], r
        st, r = ev("after=0")  # forward from the start, agentd's page (no limit)
        assert st == 200 and r["events"] == everything and "next_after" not in r, r
        st, r = ev("limit=2")
        assert [e["seq"] for e in r["events"]] == [e["seq"] for e in everything[-2:]], r
        st, r = ev("type=no_such_type")  # agentd names the types
        assert st == 400 and "'type' must be one of: user_msg, assistant_msg" in r["message"], r
        for q, says in [("limit=0", "'limit'"), ("limit=10001", "'limit'"), ("after=x", "'after'"),
                        ("after=-1", "'after'"), ("before=1.5", "'before'"), ("type=%ff", "'type' is not valid UTF-8")]:
            st, r = ev(q)
            assert st == 400 and r["error"] == "bad_request" and says in r["message"], (q, st, r)
        st, _, b = w.get("/api/events?type=user_msg")
        assert st == 400 and b"'conversation' is required" in b, (st, b)
        st, _, b = w.get("/api/events?conversation=nope")
        assert st == 404, (st, b)


def test_acting_on_conversations():
    """send, cancel, resume, fork and end from the page: each done by agentd, recorded with the person (metadata,
    or the fork's), logged by agentd-web; a bad body a 400 with nothing written; no CSRF token: 403, nothing done."""
    a = Agentd(start=False)
    gate = os.path.join(a.dir, "never")
    model = a.script("wait.py", f"""
        import json, os, sys, time
        json.load(sys.stdin)
        while not os.path.exists({gate!r}):
            time.sleep(0.02)
        print(json.dumps({{"text": "done"}}))
        """)
    a.write_config(TOOLS + f"\n[model.wait]\ncommand = python3 {model}\n")
    with a, AgentdWeb(a) as w:
        a.start()
        ck, csrf = login(w, "Ann")
        good = {"Cookie": ck, "Origin": w.base, "X-CSRF-Token": csrf, "Content-Type": "application/json"}
        no_csrf = {k: v for k, v in good.items() if k != "X-CSRF-Token"}
        c = a.create(metadata={"team": "red"})
        # no CSRF token: refused, nothing done, on every action
        for path in ["/api/send", "/api/cancel", "/api/resume", "/api/fork", "/api/end"]:
            st, r = act(w, path, {"conversation": c, "text": "x"} if path == "/api/send" else {"conversation": c}, no_csrf)
            assert st == 403 and r["error"] == "forbidden", (path, st, r)
        assert a.events(c) == [] and meta(a, c) == {"team": "red"} and a.ok({"op": "list"})["conversations"][0]["id"] == c
        assert len(a.ok({"op": "list"})["conversations"]) == 1

        # send
        st, r = act(w, "/api/send", {"conversation": c, "text": "from the page", "event_id": "e1"}, good)
        assert st == 200 and r["recorded"] is True, (st, r)
        seq = r["seq"]
        assert [(e["seq"], e["type"], e["content"]) for e in a.events(c)][0] == (seq, "user_msg", {"text": "from the page"})
        assert meta(a, c) == {"team": "red", "sent_by": "Ann"}
        st, r = act(w, "/api/send", {"conversation": c, "text": "from the page", "event_id": "e1"}, good)
        assert st == 200 and r["duplicate"] is True and r["seq"] == seq, r
        wait_for(lambda: a.events(c)[-1]["type"] == "assistant_msg", 10, "the echo")
        n = len(a.events(c))
        for body, says in [({"conversation": c}, "text"), ({"conversation": c, "text": ""}, "text"),
                           ({"conversation": c, "text": 5}, "text"), ({"text": "x"}, "conversation"),
                           ({"conversation": c, "text": "x", "by": "Eve"}, "unknown field"),
                           ({"conversation": c, "text": "x", "event_id": 1}, "event_id"), ("[1]", "JSON object"),
                           ("{", "JSON object")]:
            st, r = act(w, "/api/send", body, good)
            assert st == 400 and r["error"] == "bad_request" and says in r["message"], (body, st, r)
        st, r = act(w, "/api/send", {"conversation": "nope", "text": "x"}, good)
        assert st == 404 and r["error"] == "not_found", (st, r)
        assert len(a.events(c)) == n

        # resume and cancel a turn that runs (a model that never answers)
        g = a.create(model="wait")
        a.send(g, "wait for it")
        wait_for(lambda: (a.ok({"op": "get", "conversation": g})["conversation"]["run"] or {}).get("status") == "running",
                 10, "the turn running")
        a.ok({"op": "stop", "conversation": g})
        wait_for(lambda: a.ok({"op": "get", "conversation": g})["conversation"]["worker"] is None, 10, "the worker stopped")
        st, r = act(w, "/api/resume", {"conversation": g}, good)
        assert st == 200 and r["resumed"] is True and r["recorded"] is True, (st, r)
        assert meta(a, g) == {"resumed_by": "Ann"}
        st, r = act(w, "/api/cancel", {"conversation": g}, good)
        assert st == 200 and r["cancelled"] is True and r["recorded"] is True, (st, r)
        assert a.events(g)[-1]["type"] == "turn_cancelled" and meta(a, g) == {"resumed_by": "Ann", "cancelled_by": "Ann"}
        n = len(a.events(g))
        st, r = act(w, "/api/cancel", {"conversation": g}, good)  # idle now: nothing to cancel, nothing written
        assert st == 200 and r["cancelled"] is False and "recorded" not in r, (st, r)
        st, r = act(w, "/api/resume", {"conversation": g}, good)
        assert st == 200 and r["resumed"] is False and "nothing is owed" in r["message"], (st, r)
        assert len(a.events(g)) == n
        for path in ["/api/cancel", "/api/resume", "/api/end"]:
            st, r = act(w, path, {"conversation": g, "seq": 1}, good)
            assert st == 400 and "unknown field" in r["message"], (path, st, r)
            st, r = act(w, path, {"conversation": 7}, good)
            assert st == 400 and "conversation" in r["message"], (path, st, r)
            st, r = act(w, path, {"conversation": "nope"}, good)
            assert st == 404, (path, st, r)

        # fork: the source's metadata and who forked it
        st, r = act(w, "/api/fork", {"conversation": c, "seq": 1, "new_conversation": "f1"}, good)
        assert st == 200 and r["conversation"] == "f1" and r["forked_from"] == {"conversation": c, "seq": 1}, (st, r)
        assert meta(a, "f1") == {"team": "red", "sent_by": "Ann", "forked_by": "Ann"}
        assert meta(a, c) == {"team": "red", "sent_by": "Ann"}  # the source is not written
        st, r = act(w, "/api/fork", {"conversation": c}, good)  # at its last seq
        last = a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"]
        assert st == 200 and r["forked_from"]["seq"] == last, (st, r)
        count = len(a.ok({"op": "list"})["conversations"])
        for body, code, says in [({"conversation": c, "seq": 0}, 400, "seq"), ({"conversation": c, "seq": "1"}, 400, "seq"),
                                 ({"conversation": c, "seq": 999}, 400, "past the last seq"),
                                 ({"conversation": c, "new_conversation": "f1"}, 409, "already exists"),
                                 ({"conversation": c, "new_conversation": 3}, 400, "new_conversation"),
                                 ({"conversation": "nope"}, 404, "")]:
            st, r = act(w, "/api/fork", body, good)
            assert st == code and says in r.get("message", ""), (body, st, r)
        assert len(a.ok({"op": "list"})["conversations"]) == count

        # end: ended and by whom in one update; then a send is refused
        st, r = act(w, "/api/end", {"conversation": "f1"}, good)
        assert st == 200, (st, r)
        f1 = a.ok({"op": "get", "conversation": "f1"})["conversation"]
        assert f1["status"] == "ended" and f1["metadata"]["ended_by"] == "Ann", f1
        n = len(a.events("f1"))
        st, r = act(w, "/api/send", {"conversation": "f1", "text": "late"}, good)
        assert st == 409 and r["error"] == "conflict", (st, r)
        st, r = act(w, "/api/cancel", {"conversation": "f1"}, good)
        assert st == 409 and r["error"] == "conflict", (st, r)
        assert len(a.events("f1")) == n
        st, r = act(w, "/api/fork", {"conversation": "f1", "new_conversation": "f2"}, good)  # not ended: no ended_by
        f2 = a.ok({"op": "get", "conversation": "f2"})["conversation"]
        assert st == 200 and f2["status"] != "ended" and f2["metadata"] == {"team": "red", "sent_by": "Ann", "forked_by": "Ann"}, f2

        # a conversation holding 16 metadata keys: a send stands, its name not recorded; an end is refused whole
        full = a.create(metadata={f"k{i}": "v" for i in range(16)})
        st, r = act(w, "/api/send", {"conversation": full, "text": "hi"}, good)
        assert st == 200 and r["recorded"] is False and "16" in r["record_error"], (st, r)
        st, r = act(w, "/api/end", {"conversation": full}, good)
        assert st == 400 and "16" in r["message"], (st, r)
        assert a.ok({"op": "get", "conversation": full})["conversation"]["status"] != "ended"
        count = len(a.ok({"op": "list"})["conversations"])
        st, r = act(w, "/api/fork", {"conversation": full}, good)
        assert st == 400 and "16" in r["message"] and len(a.ok({"op": "list"})["conversations"]) == count, (st, r)
        assert len(meta(a, full)) == 16

        # a program with the token needs no CSRF token, and is named as such
        st, _, b = w.post("/api/send", json.dumps({"conversation": c, "text": "by a program"}), token=True)
        assert st == 200 and meta(a, c)["sent_by"] == "agentd-web (token)", (st, b)

        log = w.errors()
        for line in [f"agentd-web: sent a message by Ann: {c} (seq {seq})", f"agentd-web: resumed by Ann: {g}",
                     f"agentd-web: cancelled the turn by Ann: {g}", f"agentd-web: forked by Ann: {c} as f1 at seq 1",
                     "agentd-web: ended by Ann: f1", f"agentd-web: sent a message by agentd-web (token): {c}"]:
            assert line in log, (line, log)
        assert log.count("cancelled the turn") == 1 and log.count("resumed by") == 1, log
        assert log.count(f"sent a message by Ann: {c} ") == 1, log  # the send seen before (event_id e1) is not


def create_many(a, ids):
    """Create the conversations, pipelined on one connection (one group commit takes many)."""
    with a.conn(timeout=60) as cl:
        cl.raw(b"".join(json.dumps({"op": "create", "conversation": i, "settings": {"model": "echo"}}).encode() + b"\n"
                        for i in ids))
        for _ in ids:
            assert cl.recv(timeout=60)["ok"] is True


def test_search():
    """/api/search: by id, metadata and the text of the last events; at most 1,000 conversations looked at and
    100 matches a reply, with a cursor to go on; bad input a 400."""
    with Agentd() as a, AgentdWeb(a) as w:
        create_many(a, [f"bulk-{i:03d}" for i in range(1000)])  # in id order before the s- ones
        a.create(conversation="s-alpha", metadata={"ticket": "ZX-42"})
        fox = a.create(conversation="s-beta")
        a.send(fox, "the quick brown Fox jumps")
        wait_for(lambda: len(a.events(fox)) == 2, 10, "the echo")
        search = lambda q: (lambda r: (r[0], json.loads(r[2])))(w.get("/api/search?" + q))
        st, r = search("q=zx-42")  # 1,000 looked at, none found: go on after the last
        assert st == 200 and r["matches"] == [] and r["scanned"] == 1000 and r["next"] == "bulk-999", r
        st, r = search("q=zx-42&after=bulk-999")
        assert st == 200 and [(m["conversation"]["id"], m["match"], m["pair"]) for m in r["matches"]] == \
            [("s-alpha", "metadata", {"ticket": "ZX-42"})] and r["scanned"] == 2 and "next" not in r, r
        st, r = search("q=" + urllib.parse.quote("brown fox") + "&after=bulk-999")
        assert [(m["conversation"]["id"], m["match"], m["seq"], m["type"]) for m in r["matches"]] == \
            [("s-beta", "event", 2, "assistant_msg")] and "brown Fox" in r["matches"][0]["text"], r
        st, r = search("q=S-ALP&after=bulk-999")
        assert [(m["conversation"]["id"], m["match"]) for m in r["matches"]] == [("s-alpha", "id")], r
        st, r = search("q=bulk")  # 1,000 match: 100, then the next 100 after the cursor
        assert len(r["matches"]) == 100 and r["next"] == "bulk-099" and r["scanned"] == 100, r
        st, r = search("q=bulk&after=bulk-099")
        assert [m["conversation"]["id"] for m in r["matches"]] == [f"bulk-{i}" for i in range(100, 200)] \
            and r["next"] == "bulk-199", r
        st, r = search("q=bulk&after=bulk-899")  # the 100th match is not the last conversation: go on after it
        assert len(r["matches"]) == 100 and r["scanned"] == 100 and r["next"] == "bulk-999", (r["scanned"], r.get("next"))
        st, r = search("q=bulk&after=bulk-999")
        assert r["matches"] == [] and r["scanned"] == 2 and "next" not in r, r
        for q, says in [("", "'q' is required"), ("q=", "'q' is required"), ("q=%ff", "'q' is not valid UTF-8"),
                        ("q=" + "x" * 257, "at most 256"), ("q=a&after=%ff", "'after'")]:
            st, r = search(q)
            assert st == 400 and says in r["message"], (q, st, r)
        st, r = search("q=bulk&after=" + "x" * 300)  # agentd checks the cursor
        assert st == 400, (st, r)

def hash_password(pw):
    """agentd-web --hash-password: the HASH of pw for a users file."""
    p = subprocess.run([WEB_BIN, "--hash-password"], input=pw + "\n", capture_output=True, text=True,
                       timeout=scaled(30))
    assert p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr)
    return p.stdout.strip()


def user_login(w, name, password):
    """Sign in with a name and password (--users): the cookie and CSRF token, and the session."""
    body = urllib.parse.urlencode({"name": name, "password": password})
    st, h, b = w.post("/login", body, {"Origin": w.base, "Content-Type": "application/x-www-form-urlencoded"})
    assert st == 303 and h["Location"] == "/", (st, b)
    ck = h["Set-Cookie"].split(";")[0]
    st, _, b = w.get("/api/session", {"Cookie": ck}, token=False)
    assert st == 200, (st, b)
    s = json.loads(b)
    return {"Cookie": ck, "Origin": w.base, "X-CSRF-Token": s["csrf"], "Content-Type": "application/json"}, s


def test_accounts_and_roles():
    """--users: name and password sign in (no token, no login links); each role against each kind of route: every
    role reads, an approver also resolves and settles, an operator also sends, cancels, resumes, forks and ends; a
    refused act is a 403 naming the role, with nothing done; every act recorded with the person."""
    a = Agentd(config=TOOLS)
    users = os.path.join(a.dir, "users")
    with open(users, "w") as f:
        f.write(f"# the web page's accounts\nvic viewer {hash_password('v-pass')}\n\n"
                f"ada approver {hash_password('a-pass')}\nopal\toperator\t{hash_password('o pass')}\n")
    with a, AgentdWeb(a, ["--users", users]) as w:
        assert w.link is None and "login link (one use" not in w.output(), w.output()
        st, _, b = w.get("/login", token=False)
        assert st == 200 and b'name="password"' in b and b'name="token"' not in b, (st, b)
        st, _, b = w.get("/login?once=" + "a" * 64, token=False)
        assert st == 403 and b"Login links are off" in b, (st, b)
        st, _, b = w.get("/", token=False)
        assert st == 401 and b"your name and password" in b, (st, b)
        form = {"Origin": w.base, "Content-Type": "application/x-www-form-urlencoded"}
        for body in [{"name": "vic", "password": "wrong"}, {"name": "nobody", "password": "v-pass"},
                     {"name": "vic"}, {"token": w.token, "name": "vic"}, {"name": "ada", "password": "v-pass"}]:
            st, h, b = w.post("/login", urllib.parse.urlencode(body), form)
            assert st == 403 and b"Wrong name or password." in b and "Set-Cookie" not in h, (body, st, b)

        roles = {}
        for name, pw, role in [("vic", "v-pass", "viewer"), ("ada", "a-pass", "approver"), ("opal", "o pass", "operator")]:
            hdrs, sess = user_login(w, name, pw)
            assert sess["name"] == name and sess["by"] == name and sess["role"] == role and sess["accounts"] is True, sess
            roles[role] = hdrs
            assert f"agentd-web: signed in: {name} ({role})" in w.errors()
        # the name is the account's
        st, r = act(w, "/api/session", {"name": "Eve"}, roles["operator"])
        assert st == 403 and "account" in r["message"], (st, r)

        c = a.create(settings={"model": "echo", "tools": ["approve"]}, metadata={"team": "red"})
        tc = ask(a, c)
        reads = ["/api/status", "/api/pending", f"/api/conversation?id={c}", f"/api/events?conversation={c}",
                 "/api/conversations", "/api/search?q=red", "/app.js", "/"]
        resolve = {"tool_call_id": tc, "decision": "approve"}
        settle = {"conversation": c, "tool_call_id": "tc-none", "outcome": "done"}
        operate = [("/api/send", {"conversation": c, "text": "hi"}), ("/api/cancel", {"conversation": c}),
                   ("/api/resume", {"conversation": c}), ("/api/fork", {"conversation": c, "new_conversation": "f"}),
                   ("/api/end", {"conversation": c})]

        def unchanged():
            return (len(a.events(c)), meta(a, c), len(a.ok({"op": "list"})["conversations"]), pending(a, c)[0]["id"])

        before = unchanged()
        for role in ["viewer", "approver", "operator"]:
            for path in reads:
                st, _, b = w.get(path, {"Cookie": roles[role]["Cookie"]}, token=False)
                assert st == 200, (role, path, st, b[:200])
        for role, refused in [("viewer", ["/api/resolve", "/api/settle"] + [p for p, _ in operate]),
                              ("approver", [p for p, _ in operate])]:
            for path in refused:
                body = resolve if path == "/api/resolve" else settle if path == "/api/settle" else dict(operate)[path]
                st, r = act(w, path, body, roles[role])
                needs = "approver role or operator" if path in ("/api/resolve", "/api/settle") else "operator role"
                assert st == 403 and r["error"] == "forbidden" and r["message"] == (
                    f"{'vic is a viewer' if role == 'viewer' else 'ada is an approver'}: {path} needs the {needs}"), (role, path, st, r)
        assert unchanged() == before  # nothing done
        # an approver (and an operator) passes the gate: settle reaches agentd, which does not know the call
        for role in ["approver", "operator"]:
            st, r = act(w, "/api/settle", settle, roles[role])
            assert st != 403 and r["error"] != "forbidden", (role, st, r)
        st, r = act(w, "/api/resolve", resolve, roles["approver"])
        assert st == 200, (st, r)
        res = [e for e in a.events(c) if e["seq"] == r["seq"]][0]
        assert res["content"]["by"]["name"] == "ada", res
        tc2 = ask(a, c)
        st, r = act(w, "/api/resolve", dict(resolve, tool_call_id=tc2, decision="deny"), roles["operator"])
        assert st == 200 and [e for e in a.events(c) if e["seq"] == r["seq"]][0]["content"]["by"]["name"] == "opal", r
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 10, "idle")
        for path, body in operate:
            st, r = act(w, path, body, roles["operator"])
            assert st == 200, (path, st, r)
        m = meta(a, c)
        assert m["sent_by"] == "opal" and m["ended_by"] == "opal" and meta(a, "f")["forked_by"] == "opal", (m, meta(a, "f"))
        assert f"agentd-web: sent a message by opal: {c}" in w.errors() and f"agentd-web: ended by opal: {c}" in w.errors()
        # the token is still the program's way in, with every right
        st, _, b = w.post("/api/send", json.dumps({"conversation": "f", "text": "by a program"}), token=True)
        assert st == 200 and meta(a, "f")["sent_by"] == "agentd-web (token)", (st, b)
        # signing out works for every role
        st, _, _ = w.post("/logout", "{}", roles["viewer"])
        assert st == 200 and w.get("/api/status", {"Cookie": roles["viewer"]["Cookie"]}, token=False)[0] == 401


def test_bad_users_files_and_hash_password():
    """A users file agentd-web cannot use refuses the start, naming the line; --hash-password makes argon2id
    hashes (a new salt each time) and refuses an empty password."""
    h = hash_password("secret")
    assert re.fullmatch(r"\$argon2id\$v=19\$m=65536,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}", h), h
    assert hash_password("secret") != h
    for stdin in ["", "\n"]:
        p = subprocess.run([WEB_BIN, "--hash-password"], input=stdin, capture_output=True, text=True, timeout=scaled(10))
        assert p.returncode == 2 and "--hash-password" in p.stderr and p.stdout == "", (stdin, p.returncode, p.stderr)
    with Agentd() as a:
        path = os.path.join(a.dir, "users")

        def run(text, *args):
            if text is not None:
                with open(path, "w") as f:
                    f.write(text)
            p = subprocess.run([WEB_BIN, "--socket", a.socket, "--data", a.data_dir, "--listen", "127.0.0.1:0",
                                "--users", path, *args], capture_output=True, text=True, timeout=scaled(10))
            return p.returncode, p.stdout, p.stderr

        for text, says in [(f"ann viewer {h}\nbob admin {h}\n", f"{path} line 2: unknown role 'admin' (expected viewer, approver or operator)"),
                           (f"ann viewer $2y$10$abcdefghijklmnopqrstuv\n", f"{path} line 1: the hash is not an argon2id hash"),
                           (f"ann viewer {h[:-10]}\n", f"{path} line 1: the hash is not an argon2id hash"),
                           (f"ann viewer {h}\nbob operator {h}\n# c\nann approver {h}\n", f"{path} line 4: the name 'ann' is given twice"),
                           (f"ann viewer\n", f"{path} line 1: expected NAME ROLE HASH"),
                           (f"ann viewer {h} extra\n", f"{path} line 1: expected NAME ROLE HASH"),
                           ("# nobody\n\n", f"the users file {path} names nobody")]:
            rc, out, err = run(text)
            assert rc == 1 and says in err and "listening" not in out, (text, rc, err)
        os.unlink(path)
        rc, out, err = run(None)
        assert rc == 1 and f"cannot read the users file {path}: No such file or directory" in err, err
        rc, out, err = run(f"ann viewer {h}\n", "--user-header", "X-User")
        assert rc == 2 and "--users and --user-header exclude each other" in err, err


def test_agentd_not_running():
    with Agentd() as a:
        w = AgentdWeb(a)
        try:
            a.stop()
            st, _, b = w.get("/api/status")
            assert st == 502 and json.loads(b)["message"].startswith("agentd is not running"), (st, b)
        finally:
            w.stop()
        a.start()


def test_bad_start_up():
    with Agentd() as a:
        def run(*args, env=None):
            e = dict(os.environ)
            e.pop("AGENTD_WEB_TOKEN", None)
            e.update(env or {})
            p = subprocess.run([WEB_BIN, "--socket", a.socket, "--data", a.data_dir, *args], capture_output=True,
                               text=True, env=e, timeout=scaled(10))
            return p.returncode, p.stdout, p.stderr

        rc, out, err = run("--listen", "localhost:80")
        assert rc == 2 and "--listen: expected HOST:PORT" in err, err
        rc, out, err = run("--origin", "https://x.example/")
        assert rc == 2 and "--origin" in err, err
        rc, out, err = run("--poll-ms", "5")
        assert rc == 2, err
        tf = os.path.join(a.dir, "tok")
        with open(tf, "w") as f:
            f.write("0123456789abcdef0123\n")
        os.chmod(tf, 0o644)
        rc, out, err = run("--token-file", tf, "--listen", "127.0.0.1:0")
        assert rc == 1 and "open to others (mode 644)" in err, err
        os.chmod(tf, 0o600)
        os.symlink(tf, tf + ".link")
        rc, out, err = run("--token-file", tf + ".link", "--listen", "127.0.0.1:0")
        assert rc == 1 and "symbolic link" in err, err
        with open(tf, "w") as f:
            f.write("short\n")
        rc, out, err = run("--token-file", tf, "--listen", "127.0.0.1:0")
        assert rc == 1 and "16-256 printable characters" in err, err
        rc, out, err = run(env={"AGENTD_WEB_TOKEN": "has space but long enough"})
        assert rc == 2 and "AGENTD_WEB_TOKEN" in err, err
        # a given token: no file made
        w = AgentdWeb(a, env=dict(os.environ, AGENTD_WEB_TOKEN="t" * 20))
        try:
            assert w.token == "t" * 20 and not os.path.exists(os.path.join(a.data_dir, "web-token"))
            assert w.get("/api/status")[0] == 200
        finally:
            w.stop()
        rc, out, err = run("--help")
        assert rc == 0 and out.startswith("usage: agentd-web") and "--token-file" in out and err == "", (out, err)
        assert "--users FILE" in out and "--hash-password" in out, out
        rc, out, err = run("--bogus")
        assert rc == 2 and "usage: agentd-web" in err, err
        rc, out, err = run("--version")
        assert rc == 0 and re.fullmatch(r"agentd-web \d+\.\d+\.\d+\n", out), out


harness.main(globals())
