#!/usr/bin/env python3
"""An agent loop that waits for a person's approval before it acts.

agentd must know a human tool named approve_payment. Save this as agentd.ini:

    [tool.approve_payment]
    executor = human
    prompt = Approve this payment?
    expires = 1h

and start agentd with it: `agentd --config agentd.ini` (socket ./agentd-data/agentd.sock). Then run

    python3 approval_agent.py [--socket PATH] [--amount N] [--model NAME]

The agent opens a conversation that may use approve_payment and asks for a payment. With the built-in
echo model the message `/tool approve_payment {"amount": N}` makes the model call the tool; a real model
decides by itself. The conversation is then suspended on the call: the agent prints its id and waits
(agentd keeps the call durably; the agent's watch resumes if agentd restarts) until a person answers:

    agentctl resolve TOOL_CALL_ID --result '{"approved": true}'          # approve
    agentctl resolve TOOL_CALL_ID --status errored --result '"no"'        # deny

or the call expires. Then the model's next answer arrives, and the agent pays or does not.
Exit status: 0 paid, 3 not approved (denied or expired), 1 an error.
"""
import argparse
import json
import sys

from agentd_client import AgentdError, Client, Delta


def run(client, amount, model="echo"):
    conv = client.create(model, tools=["approve_payment"],
                         system="Ask approve_payment before paying anything.")
    print(f"conversation: {conv}", flush=True)
    decision = None  # the resolution event's content once a person (or the expiry) settled the call
    # Watch from seq 0 before sending: every event is seen, none can slip between two calls. resume:
    # if agentd restarts meanwhile, the watch reconnects and goes on after the last event it gave.
    with client.watch(conv, after=0, resume=True) as events:
        client.send(conv, "/tool approve_payment " + json.dumps({"amount": amount}))
        for item in events:
            if isinstance(item, Delta):
                continue  # a preview of the model's text; the assistant_msg holds all of it
            content = item.content
            if item.type == "suspension":
                print(f"waiting for approval: {content['tool_call_id']} ({content['prompt']})", flush=True)
            elif item.type == "resolution":
                decision = content
                print(f"decision: {content['status']} {json.dumps(content['result'])}", flush=True)
            elif item.type == "assistant_msg" and decision is not None:
                print(f"model: {content['text']}", flush=True)
                break  # the turn after the decision: the model has seen it
            elif item.type == "error":
                raise RuntimeError(f"the model failed: {content['message']}")
        else:
            raise RuntimeError(f"conversation {conv} was deleted")
    result = decision["result"]
    approved = decision["status"] == "resolved" and isinstance(result, dict) and result.get("approved") is True
    print(f"paying {amount}" if approved else "not paying", flush=True)
    return 0 if approved else 3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="agentd's socket (default: $AGENTD_SOCKET, else ./agentd-data/agentd.sock)")
    ap.add_argument("--amount", type=int, default=120)
    ap.add_argument("--model", default="echo")
    args = ap.parse_args()
    try:
        with Client(args.socket) as client:
            return run(client, args.amount, args.model)
    except (AgentdError, RuntimeError) as e:
        print(f"approval_agent: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
