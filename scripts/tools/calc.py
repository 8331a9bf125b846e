#!/usr/bin/env python3
"""An example server tool for agentd (docs/configuration.md, "The server tool protocol"): evaluates arithmetic, idempotently.

    [tool.calc]
    executor = server
    command = /usr/bin/env python3 scripts/tools/calc.py --journal ./calc-journal
    timeout = 10s
    description = Evaluate an arithmetic expression: {"expr": "2 * (3 + 4)"}

stdin: {"tool_call_id", "name", "args": {"expr": "..."}, "conversation", "attempt"}; AGENTD_TOOL_CALL_ID and
AGENTD_CONVERSATION are in the environment too. stdout: the JSON result; exit 0 = resolved, non-zero =
errored (the reason on stderr).

Idempotency: agentd re-dispatches a call interrupted by a kill with the SAME tool_call_id. A tool with side
effects must do them at most once per id; this one keeps a journal (one file per tool_call_id) and answers
a repeated id from it instead of acting again. Only + - * / // % ** and parentheses over numbers are
evaluated (no names, no calls).
"""
import argparse
import ast
import json
import operator
import os
import sys

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
       ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
       ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate(node):
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
        return OPS[type(node.op)](evaluate(node.operand))
    raise ValueError("only numbers, + - * / // % ** and parentheses are allowed")


def main():
    p = argparse.ArgumentParser(description="agentd example tool: arithmetic, idempotent by tool_call_id")
    p.add_argument("--journal", help="directory remembering each tool_call_id's result")
    a = p.parse_args()
    req = json.load(sys.stdin)
    call_id = os.environ.get("AGENTD_TOOL_CALL_ID") or req.get("tool_call_id")
    path = None
    if a.journal and call_id:
        os.makedirs(a.journal, exist_ok=True)
        path = os.path.join(a.journal, call_id.replace("/", "_"))
        if os.path.exists(path):
            with open(path) as f:
                sys.stdout.write(f.read())
            return
    expr = (req.get("args") or {}).get("expr")
    if not isinstance(expr, str):
        sys.exit('calc: args.expr must be a string, e.g. {"expr": "1 + 2"}')
    try:
        value = evaluate(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as e:
        sys.exit(f"calc: {expr!r}: {e}")
    out = json.dumps({"expr": expr, "value": value}) + "\n"
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(out)
        os.rename(tmp, path)  # all or nothing: a kill leaves no half answer
    sys.stdout.write(out)


if __name__ == "__main__":
    main()
