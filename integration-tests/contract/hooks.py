"""schemathesis hooks for the Savepoint API contract run.

Runs: see RUNS below (real thread ids in paths).

Starts: generated workflow names are almost never ones a worker serves, so most starts would be 422
and the stateful phase (start -> get -> history -> resume -> cancel) would have no runs to
follow. Half the generated starts are pointed at a workflow the test's workers serve; the
other half keep the generated name, so unknown workflows stay covered.

The result long poll: a valid `timeout` (0-120 s) makes the server hold the request that
long when the run does not end (the test's approval runs wait for an answer), which would
spend the run's time budget on a few requests and pass schemathesis' own read timeout. Valid
timeouts are cut to at most 2 s, and a request without one (the server's default is 30 s)
gets 1 s; invalid ones (negative, over 120, not a number) are sent as generated, so their 400
stays covered. (The default and long waits are tested in `api::result_long_poll_waits_until_the_run_ends`.)
"""
import os
import random

import schemathesis

SERVED = [w for w in os.environ.get("SAVEPOINT_CONTRACT_WORKFLOWS", "approval,chain").split(",") if w]
# Runs the test started before the run (approvals waiting for an answer): half the generated
# thread ids in a path are one of them, so the operations on a run (retry, resolve, fork,
# restart, pause, …) reach their own checks instead of answering 404 every time.
RUNS = [t for t in os.environ.get("SAVEPOINT_CONTRACT_RUNS", "").split(",") if t]


@schemathesis.hook
def map_path_parameters(ctx, params):
    if RUNS and isinstance(params, dict) and "thread_id" in params and random.random() < 0.5:
        params = dict(params, thread_id=random.choice(RUNS))
    return params


@schemathesis.hook
def map_body(ctx, body):
    op = ctx.operation
    if op is None or op.method.upper() != "POST" or not isinstance(body, dict) or random.random() >= 0.5:
        return body
    # Starts and schedules name a served workflow; forks and restarts an entry the test's
    # runs have (an approval waiting has one).
    if op.path in ("/v1/runs", "/v1/schedules") and "workflow" in body:
        body = dict(body, workflow=random.choice(SERVED))
    elif op.path.endswith(("/fork", "/restart")) and "from_step" in body:
        body = dict(body, from_step=random.choice([0, 1]))
    return body


@schemathesis.hook
def map_query(ctx, query):
    op = ctx.operation
    if op is not None and op.path.endswith("/result"):
        query = dict(query or {})
        t = query.get("timeout")
        if t is None:
            query["timeout"] = 1
        elif isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= 120:
            query["timeout"] = min(t, 2)
    return query
