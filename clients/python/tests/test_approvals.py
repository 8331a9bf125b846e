"""Approvals through the client (docs/python.md): a pending call's deadline moved with extend (and every
refusal, nothing written), the args digest the client computes equal to agentd's, and a resolve carrying
it refused when the args are not those."""
import asyncio
import json

import pytest

from agentd_client import (AsyncClient, BadRequest, Client, Conflict, Extension, NotFound, Stale, args_digest,
                           canonical_json)
from conftest import wait_for

ARGS = {"to": "Zoë", "amount": 12.5, "memo": "a\nb\u0001", "items": [1, 2.0, 1e21, 1e-7, {"b": True, "a": None}],
        "😀": 0, "\ufb33": -0.0}


def ask(c, conv, args):
    c.send(conv, "/tool approve " + json.dumps(args))
    return wait_for(lambda: c.tool_calls(conv, status="pending"), 10, "the approval")[0]


def test_canonical_json_is_rfc_8785():
    assert canonical_json({"b": [1, 2.50, 1e30, 4.5e-7], "a": "x\ty\"\\", "": None}) == \
        '{"":null,"a":"x\\ty\\"\\\\","b":[1,2.5,1e+30,4.5e-7]}'
    assert canonical_json({"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001F600": 5, "\u0080": 6, "\u00f6": 7}) == \
        '{"\\r":2,"1":4,"\u0080":6,"\u00f6":7,"\u20ac":1,"\U0001F600":5,"\ufb33":3}'
    assert args_digest({"amount": 5}) == "7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf"
    with pytest.raises(ValueError):
        canonical_json(float("nan"))


def test_digest_matches_agentds_and_resolve_checks_it(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo", tools=["approve"])
        tc = ask(c, conv, ARGS)
        assert tc.args_digest == args_digest(tc.args) == args_digest(ARGS)
        last = c.events(conv).last_seq
        with pytest.raises(Conflict, match="its arguments are not those approved"):
            c.approve(tc.id, args_digest=args_digest({"amount": 1}))
        with pytest.raises(BadRequest, match="'args_digest' must be 64 lowercase hex digits"):
            c.deny(tc.id, args_digest="ABC")
        assert c.events(conv).last_seq == last and c.tool_call(tc.id).status == "pending"
        assert c.approve(tc.id, by="ops", args_digest=tc.args_digest).conversation == conv
        assert c.tool_call(tc.id).status == "resolved"
        with pytest.raises(Stale):
            c.resolve(tc.id, True, args_digest=tc.args_digest)


def test_extend(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo", tools=["approve"])
        tc = ask(c, conv, {"amount": 5})
        r = c.extend(conv, tc.id, expires_in_ms=7200000, by="ops")
        assert isinstance(r, Extension) and r.conversation == conv and r.deadline > tc.deadline
        assert c.tool_call(tc.id).deadline == r.deadline
        ev = c.events(conv, type="deadline_extended").events[0]
        assert ev.seq == r.seq and ev.content["previous"] == tc.deadline and ev.content["by"]["name"] == "ops"
        assert c.extend(conv, tc.id, deadline=r.deadline + 1000).deadline == r.deadline + 1000
        last = c.events(conv).last_seq
        with pytest.raises(BadRequest, match="not in the future"):
            c.extend(conv, tc.id, deadline=1000)
        with pytest.raises(BadRequest, match="give one of 'expires_in_ms' and 'deadline'"):
            c.extend(conv, tc.id, expires_in_ms=1000, deadline=r.deadline)
        with pytest.raises(NotFound):
            c.extend(conv, "tc-none", expires_in_ms=1000)
        assert c.events(conv).last_seq == last
        c.deny(tc.id, args_digest=tc.args_digest)
        with pytest.raises(Stale):
            c.extend(conv, tc.id, expires_in_ms=1000)

    async def main():
        async with AsyncClient(agentd.socket) as ac:
            conv = await ac.create("echo", tools=["approve"])
            await ac.send(conv, '/tool approve {"n": 1}')
            for _ in range(500):
                pend = await ac.tool_calls(conv, status="pending")
                if pend:
                    break
                await asyncio.sleep(0.02)
            r = await ac.extend(conv, pend[0].id, expires_in_ms=60000)
            assert (await ac.tool_call(pend[0].id)).deadline == r.deadline
            await ac.approve(pend[0].id, args_digest=pend[0].args_digest)

    asyncio.run(main())
