"""Oversized and rejected request bodies reach Python clients as their JSON error.

Usage: oversized.py BASE_URL LIMIT_BYTES

Sends bodies of 300 KiB, 1 MiB and 16 MiB (over the limit) with urllib and with requests,
plus early rejections with a body attached (wrong content type, unknown route), and checks
that each answer is the documented status with an `{"error": ...}` body, never a connection
reset. Prints one JSON line per request; exits 1 on the first that fails.
"""
import json
import sys
import urllib.error
import urllib.request

import requests

BASE, LIMIT = sys.argv[1].rstrip("/"), int(sys.argv[2])
failures = 0


def body_of(size):
    """A JSON start request of about `size` bytes."""
    pad = size - len('{"workflow":"echo","input":""}')
    return json.dumps({"workflow": "echo", "input": "x" * max(pad, 0)}).encode()


def with_urllib(path, data, content_type):
    req = urllib.request.Request(BASE + path, data=data, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def with_requests(path, data, content_type):
    r = requests.post(BASE + path, data=data, headers={"Content-Type": content_type}, timeout=60)
    return r.status_code, r.content


def check(client, label, path, data, content_type, want, needle):
    global failures
    send = with_urllib if client == "urllib" else with_requests
    try:
        status, raw = send(path, data, content_type)
        error = json.loads(raw).get("error", "")
        ok = status == want and needle in error
        seen = {"status": status, "error": error[:120]}
    except Exception as e:  # a reset, a broken pipe, a non-JSON body
        ok, seen = False, {"exception": f"{type(e).__name__}: {e}"}
    print(json.dumps({"client": client, "case": label, "bytes": len(data), "want": want, "ok": ok, **seen}), flush=True)
    if not ok:
        failures += 1


for client in ("urllib", "requests"):
    for label, size in (("300KiB", 300 * 1024), ("1MiB", 1024 * 1024), ("16MiB", 16 * 1024 * 1024)):
        assert size > LIMIT
        check(client, f"start {label}", "/v1/runs", body_of(size), "application/json", 413, f"limit of {LIMIT} bytes")
    big = body_of(1024 * 1024)
    check(client, "resume 1MiB", "/v1/runs/some-run/resume", big, "application/json", 413, "exceeds the limit")
    check(client, "wrong content type 1MiB", "/v1/runs", big, "text/plain", 413, "exceeds the limit")
    small = body_of(4 * 1024)
    check(client, "wrong content type", "/v1/runs", small, "text/plain", 415, "Content-Type: application/json")
    check(client, "unknown route with a body", "/v1/nowhere", small, "application/json", 404, "no route")
    check(client, "wrong method with a body", "/v1/runs/some-run", small, "application/json", 405, "not allowed")

ready = requests.get(BASE + "/readyz", timeout=10)
print(json.dumps({"readyz": ready.status_code}), flush=True)
sys.exit(1 if failures or ready.status_code != 200 else 0)
