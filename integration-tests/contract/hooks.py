"""schemathesis hooks for the Savepoint API contract run.

Generated workflow names are almost never ones a worker serves, so most starts would be 422
and the stateful phase (start -> get -> history -> resume -> cancel) would have no runs to
follow. Half the generated starts are pointed at a workflow the test's workers serve; the
other half keep the generated name, so unknown workflows stay covered.
"""
import os
import random

import schemathesis

SERVED = [w for w in os.environ.get("SAVEPOINT_CONTRACT_WORKFLOWS", "approval,chain").split(",") if w]


@schemathesis.hook
def map_body(ctx, body):
    op = ctx.operation
    if op is not None and op.method.upper() == "POST" and op.path == "/v1/runs":
        if isinstance(body, dict) and "workflow" in body and random.random() < 0.5:
            body = dict(body, workflow=random.choice(SERVED))
    return body
