"""Conversation metadata and filtered lists through the real socket and agentctl (docs/protocol.md `create`,
`update`, `list`): metadata set on create, merged by update (null deletes a key), shown by get and list;
list filtered by metadata, status, model and updated-time range with the cursor; every bad input refused
with a clear error and nothing changed."""
import json

import harness
from harness import Agentd


def get(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]


def ids(a, **fields):
    r = a.ok({"op": "list", **fields})
    return [c["id"] for c in r["conversations"]], r.get("next")


def test_metadata_set_merged_deleted_and_shown():
    with Agentd() as a:
        a.create(conversation="c1", metadata={"team": "red", "user": "u-1"})
        assert get(a, "c1")["metadata"] == {"team": "red", "user": "u-1"}
        a.create(conversation="c2")
        assert get(a, "c2")["metadata"] == {}
        before = get(a, "c1")["updated_at"]
        a.ok({"op": "update", "conversation": "c1", "metadata": {"user": None, "env": "prod"}})
        c = get(a, "c1")
        assert c["metadata"] == {"team": "red", "env": "prod"}, c
        assert c["updated_at"] >= before
        assert c["settings"] == {"model": "echo"}  # settings untouched
        listed = a.ok({"op": "list"})["conversations"]
        assert {x["id"]: x["metadata"] for x in listed} == {"c1": {"team": "red", "env": "prod"}, "c2": {}}
        # deleting a key that is not there is a no-op; every key deleted leaves {}
        a.ok({"op": "update", "conversation": "c1", "metadata": {"nothere": None, "team": None, "env": None}})
        assert get(a, "c1")["metadata"] == {}
        # an ended conversation's metadata may still change; its settings may not
        a.ok({"op": "update", "conversation": "c2", "status": "ended"})
        a.ok({"op": "update", "conversation": "c2", "metadata": {"archived": "yes"}})
        assert get(a, "c2")["metadata"] == {"archived": "yes"}
        # agentctl: create --meta, update --meta/--unset-meta, get shows metadata.KEY
        _, out, _ = a.ctl("create", "--id", "c3", "--model", "echo", "--meta", "team=blue", "--meta", "k=a=b")
        assert out.strip() == "c3"
        assert get(a, "c3")["metadata"] == {"team": "blue", "k": "a=b"}
        a.ctl("update", "c3", "--meta", "env=dev", "--unset-meta", "k")
        _, out, _ = a.ctl("get", "c3")
        lines = {l.split(":", 1)[0]: l.split(":", 1)[1].strip() for l in out.splitlines()}
        assert lines["metadata.team"] == "blue" and lines["metadata.env"] == "dev" and "metadata.k" not in lines, out
        _, out, _ = a.ctl("--json", "get", "c3")
        assert json.loads(out)["conversation"]["metadata"] == {"team": "blue", "env": "dev"}


def test_list_filters_combine_with_the_cursor():
    with Agentd(start=False) as a:
        a.write_config("[model.other]\ncommand = python3 -c 'print(1)'\n")
        a.start()
        for i in range(1, 9):
            a.create(model="other" if i == 8 else "echo", conversation=f"c{i}",
                     metadata={"team": "red" if i % 2 else "blue", "env": "prod"})
        a.ok({"op": "update", "conversation": "c3", "status": "ended"})
        a.ok({"op": "update", "conversation": "c5", "metadata": {"env": "dev"}})
        red = ["c1", "c3", "c5", "c7"]
        assert ids(a, metadata={"team": "red"}) == (red, None)
        assert ids(a, metadata={"team": "red", "env": "prod"}) == (["c1", "c3", "c7"], None)
        assert ids(a, metadata={"team": "green"}) == ([], None)
        assert ids(a, metadata={}) == ([f"c{i}" for i in range(1, 9)], None)
        assert ids(a, metadata={"team": "red"}, status="ended") == (["c3"], None)
        assert ids(a, metadata={"team": "red"}, status="idle") == (["c1", "c5", "c7"], None)
        # paging: limit + next as the after of the next page, filters kept
        page, nxt = ids(a, metadata={"team": "red"}, limit=2)
        assert (page, nxt) == (["c1", "c3"], "c3")
        assert ids(a, metadata={"team": "red"}, limit=2, after=nxt) == (["c5", "c7"], None)
        # model (settings.model)
        assert ids(a, model="echo") == ([f"c{i}" for i in range(1, 8)], None)
        assert ids(a, model="other") == (["c8"], None)
        assert ids(a, model="other", metadata={"team": "blue"}) == (["c8"], None)
        assert ids(a, model="nosuch") == ([], None)
        a.ok({"op": "update", "conversation": "c6", "settings": {"model": "other"}})
        assert ids(a, model="other", limit=1) == (["c6"], "c6")
        assert ids(a, model="other", limit=1, after="c6") == (["c8"], None)
        # updated-time range: c3 and c5 were updated last
        convs = {c["id"]: c for c in a.ok({"op": "list"})["conversations"]}
        t5 = convs["c5"]["updated_at"]
        t7 = convs["c7"]["updated_at"]
        late, _ = ids(a, updated_after=t7)
        assert set(late) <= {"c3", "c5", "c6", "c8"} and "c5" in late and "c6" in late, late
        assert "c5" not in ids(a, updated_before=t5)[0]
        assert ids(a, updated_after=t5 - 1, updated_before=t5 + 1, metadata={"env": "dev"}) == (["c5"], None)
        # agentctl list with the same filters
        _, out, _ = a.ctl("list", "--meta", "team=red", "--meta", "env=prod", "--status", "idle")
        rows = [l.split()[0] for l in out.splitlines()[1:]]
        assert rows == ["c1", "c7"], out
        _, out, _ = a.ctl("-q", "list", "--meta", "team=red", "--limit", "3")
        assert out.split() == ["c1", "c3", "c5"], out
        _, out, _ = a.ctl("list", "--meta", "team=red", "--limit", "3")
        assert out.strip().splitlines()[-1] == "next: c5", out
        _, out, _ = a.ctl("-q", "list", "--model", "echo", "--updated-after", str(t5 - 1), "--updated-before",
                          str(t5 + 1))
        assert out.split() == ["c5"], out


def test_bad_metadata_and_filters_are_refused_and_change_nothing():
    with Agentd() as a:
        a.create(conversation="c1", metadata={"team": "red"})
        before = get(a, "c1")
        many = {f"k{i}": "v" for i in range(17)}
        bad_create = [
            ("x", "'metadata' must be an object of strings"),
            ({"n": 1}, "'metadata.n' must be a string"),
            ({"n": None}, "'metadata.n' must be a string"),
            ({"": "v"}, "'metadata' keys must be 1-64 bytes"),
            ({"k" * 65: "v"}, "'metadata' keys must be 1-64 bytes"),
            ({"k": "v" * 257}, "'metadata.k' is longer than 256 bytes"),
            ({"k": "a\u0000b"}, "\\u0000 is not allowed"),  # refused by the JSON reader already
            (many, "'metadata' has 17 keys (at most 16)"),
        ]
        for m, msg in bad_create:
            r = a.request({"op": "create", "conversation": "new", "settings": {"model": "echo"}, "metadata": m})
            assert r["ok"] is False and r["error"] == "bad_request" and msg in r["message"], (m, r)
        assert a.request({"op": "get", "conversation": "new"})["error"] == "not_found"
        for m, msg in bad_create[:1] + bad_create[3:]:
            r = a.request({"op": "update", "conversation": "c1", "metadata": m})
            assert r["ok"] is False and r["error"] == "bad_request" and msg in r["message"], (m, r)
        r = a.request({"op": "update", "conversation": "c1", "metadata": {"n": 1}})
        assert r["error"] == "bad_request" and "must be a string, or null to delete it" in r["message"], r
        # a merge past 16 keys is refused whole, with the settings given beside it
        r = a.request({"op": "update", "conversation": "c1", "settings": {"system": "s"},
                       "metadata": {f"k{i}": "v" for i in range(16)}})
        assert r["error"] == "bad_request" and "would have 17 keys (at most 16)" in r["message"], r
        assert get(a, "c1") == before
        # the largest allowed fits, through the index too
        big = {chr(ord("a") + i) * 64: "v" * 256 for i in range(16)}
        a.create(conversation="i" * 128, metadata=big)
        assert ids(a, metadata={"p" * 64: "v" * 256}) == (["i" * 128], None)
        bad_list = [
            ({"metadata": {"n": 1}}, "'metadata.n' must be a string"),
            ({"metadata": {"": "v"}}, "keys must be 1-64 bytes"),
            ({"metadata": [1]}, "'metadata' must be an object"),
            ({"model": 3}, "'model' must be a model name"),
            ({"model": ""}, "'model' must be a model name"),
            ({"updated_after": -1}, "'updated_after' must be an integer"),
            ({"updated_before": 0}, "'updated_before' must be an integer from 1"),
            ({"updated_before": "x"}, "'updated_before' must be an integer"),
            ({"metadata": {"team": "red"}, "typo": 1}, "typo"),
        ]
        for f, msg in bad_list:
            r = a.request({"op": "list", **f})
            assert r["ok"] is False and r["error"] == "bad_request" and msg in r["message"], (f, r)
        # agentctl: usage errors exit 2 before anything is sent
        rc, _, err = a.ctl("create", "--model", "echo", "--meta", "novalue", check=False)
        assert rc == 2 and "expected KEY=VALUE" in err, err
        rc, _, err = a.ctl("list", "--meta", "=v", check=False)
        assert rc == 2 and "expected KEY=VALUE" in err, err
        rc, _, err = a.ctl("update", "c1", "--meta", "k=" + "v" * 257, check=False)
        assert rc == 1 and "bad_request" in err and "longer than 256 bytes" in err, err
        assert get(a, "c1") == before


harness.main(globals())
