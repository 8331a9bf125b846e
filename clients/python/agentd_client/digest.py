"""The digest of a tool call's arguments, as agentd computes it (docs/protocol.md, "Arguments digest"): the
lowercase hex SHA-256 of their RFC 8785 canonical JSON (JCS) in UTF-8. A person approves the arguments they
were shown; sending their digest with the decision (resolve's args_digest) makes agentd refuse arguments that
are not those.

    from agentd_client import args_digest
    c.approve(call.id, args_digest=args_digest(shown_args))
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any


def _number(x: float) -> str:
    """x as ECMAScript's Number.prototype.toString writes it (what JSON.stringify gives): the shortest
    digits that read back to x (Python's repr finds the same), laid out by the decimal point's place."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{x!r} has no JSON form")
    if x == 0:
        return "0"
    if x < 0:
        return "-" + _number(-x)
    sign, digits, exp = Decimal(repr(x)).normalize().as_tuple()
    d = "".join(map(str, digits))
    k, n = len(d), len(d) + exp  # the decimal point stands after n digits
    if k <= n <= 21:
        return d + "0" * (n - k)
    if 0 < n <= 21:
        return d[:n] + "." + d[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + d
    e = n - 1
    return d[0] + ("." + d[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))


def canonical_json(value: Any) -> str:
    """value's RFC 8785 canonical JSON text: no whitespace, members sorted by their names' UTF-16 code
    units, strings with only the characters JSON requires escaped, numbers as ECMAScript writes them."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return _number(float(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical_json(value[k]) for k in keys) + "}"
    raise TypeError(f"{type(value).__name__} has no JSON form")


def args_digest(args: Any) -> str:
    """The digest agentd shows as a tool call's args_digest and resolve's args_digest takes."""
    return hashlib.sha256(canonical_json(args).encode("utf-8")).hexdigest()
