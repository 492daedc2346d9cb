//! Security against real Redis and RabbitMQ (README "Security"): API tokens and roles with
//! the action recorded in the run's events, the console's sign-in, the per-token rate limit,
//! the loopback rule for an open API, payloads sealed at rest (every key of a namespace dumped
//! after real runs), sealed values bound to their run and field, key rotation, secrets never
//! shown, and the limits that protect Redis from one client.

use reqwest::StatusCode;
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::scenario::World;
use savepoint_runtime::config::Config;
use savepoint_runtime::security::tokens::token_digest;
use savepoint_runtime::security::{PayloadCodec, Redacted, Role, TokenSpec};
use savepoint_store::{ScriptStore, StoreError};
use serde_json::{json, Value};
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

const READ: &str = "spt_read-token-for-tests-0000000000000000000000";
const OPERATE: &str = "spt_operate-token-for-tests-000000000000000000";
const ADMIN: &str = "spt_admin-token-for-tests-00000000000000000000";

fn with_tokens(cfg: &mut Config) {
    cfg.security.api_tokens = [
        ("viewer", Role::Read, READ),
        ("ci-bot", Role::Operate, OPERATE),
        ("oncall", Role::Admin, ADMIN),
    ]
    .iter()
    .map(|(name, role, tok)| TokenSpec {
        name: (*name).into(),
        role: *role,
        sha256: token_digest(tok),
    })
    .collect();
}

async fn call(
    w: &World,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = w.http.request(method, format!("{}{path}", w.sched.base_url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("api reachable");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn wait_status(w: &World, t: &str, token: &str, want: &str) -> Value {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let (s, run) = call(w, reqwest::Method::GET, &format!("/v1/runs/{t}"), Some(token), None).await;
        assert_eq!(s, 200, "{run}");
        if run["status"] == want {
            return run;
        }
        assert!(tokio::time::Instant::now() < deadline, "run {t} never {want}: {run}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// 401 without a token or with a wrong one, 403 for a role that may not, the probes open,
/// and every operate/admin action on a run in its events with the token's name.
#[tokio::test]
async fn tokens_roles_and_the_actions_recorded_with_the_token_name() {
    use reqwest::Method;
    let w = World::new("auth", with_tokens).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("approval").await;

    for probe in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            call(&w, Method::GET, probe, None, None).await.0,
            200,
            "{probe} needs no token"
        );
    }
    let r = w
        .http
        .get(format!("{}/v1/runs", w.sched.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().get("www-authenticate").is_some());
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("authentication required"),
        "{body}"
    );
    let (s, body) = call(&w, Method::GET, "/v1/runs", Some("spt_wrong"), None).await;
    assert_eq!((s, body["error"].as_str()), (401, Some("the token is not valid")));

    // read: may look, may not start.
    assert_eq!(call(&w, Method::GET, "/v1/runs", Some(READ), None).await.0, 200);
    let start = json!({"workflow": "approval", "input": {}});
    let (s, body) = call(&w, Method::POST, "/v1/runs", Some(READ), Some(start.clone())).await;
    assert_eq!(s, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("\"viewer\" has role read; POST /v1/runs needs operate"),
        "{body}"
    );

    // operate: starts and answers; may not resolve effects.
    let (s, body) = call(&w, Method::POST, "/v1/runs", Some(OPERATE), Some(start)).await;
    assert_eq!(s, 201, "{body}");
    let t = body["thread_id"].as_str().unwrap().to_owned();
    wait_status(&w, &t, READ, "waiting").await;
    let (s, body) = call(
        &w,
        Method::POST,
        &format!("/v1/runs/{t}/effects/k/resolve"),
        Some(OPERATE),
        Some(json!({"applied": false})),
    )
    .await;
    assert_eq!(s, 403, "{body}");
    let (s, body) = call(
        &w,
        Method::POST,
        &format!("/v1/runs/{t}/resume"),
        Some(OPERATE),
        Some(json!({"value": "yes"})),
    )
    .await;
    assert_eq!(s, 202, "{body}");
    wait_status(&w, &t, READ, "completed").await;
    // admin: reaches the handler (the run has no in-doubt effect: 409, not 403).
    let (s, body) = call(
        &w,
        Method::POST,
        &format!("/v1/runs/{t}/effects/k/resolve"),
        Some(ADMIN),
        Some(json!({"applied": false})),
    )
    .await;
    assert_ne!(s, 403, "{body}");
    assert!((400..500).contains(&s), "{s} {body}");

    let tid = ThreadId::new(t.clone()).unwrap();
    let ops: Vec<String> = w
        .store
        .events(&tid, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.typ == "operator")
        .map(|e| e.detail)
        .collect();
    assert_eq!(
        ops,
        [
            "ci-bot: POST start",
            "ci-bot: POST resume",
            "oncall: POST effects/k/resolve"
        ],
        "{ops:?}"
    );

    // The CLI's client sends the token.
    let client = savepoint_client::ApiClient::new(&w.sched.base_url).with_token(Some(READ.into()));
    assert_eq!(client.get(&t).await.unwrap()["status"], "completed");
    let anonymous = savepoint_client::ApiClient::new(&w.sched.base_url);
    assert_eq!(anonymous.get(&t).await.unwrap_err().status(), Some(401));
}

/// The console: a page without the cookie goes to the sign-in page; a good token sets an
/// HttpOnly, SameSite=Strict cookie that opens the pages; a cross-site write with the cookie
/// is refused.
#[tokio::test]
async fn the_console_signs_in_with_a_token_cookie() {
    let w = World::new("authui", with_tokens).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = &w.sched.base_url;
    let r = http.get(format!("{base}/ui")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/ui/login");
    assert_eq!(http.get(format!("{base}/ui/login")).send().await.unwrap().status(), 200);
    let bad = http
        .post(format!("{base}/ui/login"))
        .body("token=nope")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    assert!(bad.text().await.unwrap().contains("That token is not valid"));
    let ok = http
        .post(format!("{base}/ui/login"))
        .body(format!("token={READ}"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let page = http
        .get(format!("{base}/ui"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    // The cookie's read role may not cancel; and a write from another origin is refused.
    let cancel = http
        .post(format!("{base}/v1/runs/x-1/cancel"))
        .header("cookie", &pair)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), StatusCode::FORBIDDEN);
    let admin_pair = format!("sp_token={ADMIN}");
    let cross = http
        .post(format!("{base}/v1/runs/x-1/cancel"))
        .header("cookie", &admin_pair)
        .header("origin", "http://evil.example")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    assert!(cross.text().await.unwrap().contains("cross-origin"));
}

/// A token over its rate gets 429 with Retry-After; another token is not slowed by it.
#[tokio::test]
async fn the_rate_limit_is_per_token() {
    use reqwest::Method;
    let w = World::new("rate", |c| {
        with_tokens(c);
        c.security.rate_limit_per_sec = 2;
        c.security.rate_limit_burst = 5;
    })
    .await;
    let mut codes = Vec::new();
    for _ in 0..12 {
        codes.push(call(&w, Method::GET, "/v1/runs", Some(READ), None).await.0);
    }
    let ok = codes.iter().filter(|c| **c == 200).count();
    assert!((5..=7).contains(&ok), "burst 5 (+ a refill or two), got {codes:?}");
    assert!(codes.ends_with(&[429]), "{codes:?}");
    let r = w
        .http
        .get(format!("{}/v1/runs", w.sched.base_url))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get("retry-after").is_some());
    assert_eq!(call(&w, Method::GET, "/v1/runs", Some(OPERATE), None).await.0, 200);
}

/// An open API refuses a non-loopback address unless told; with tokens any address serves.
#[tokio::test]
async fn an_open_api_serves_loopback_only_unless_told() {
    let w = World::new("bind", |_| {}).await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let err = savepoint_scheduler::serve(w.cfg.clone(), listener, Default::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("refusing to serve an open API"), "{err}");
    for tune in [
        (|c: &mut Config| c.security.allow_open_bind = true) as fn(&mut Config),
        with_tokens,
    ] {
        let mut cfg = w.cfg.clone();
        tune(&mut cfg);
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let serving = tokio::spawn(savepoint_scheduler::serve(cfg, listener, stop.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!serving.is_finished(), "serves");
        stop.cancel();
        serving.await.unwrap().unwrap();
    }
}

/// Every key of the namespace, every value (strings, hashes, lists, sorted sets), as bytes.
async fn dump_namespace(store: &ScriptStore, ns: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = store
            .query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{ns}:*"))
                    .arg("COUNT")
                    .arg(1000),
            )
            .await
            .unwrap();
        for k in keys {
            let typ: String = store.query(redis::cmd("TYPE").arg(&k)).await.unwrap();
            let values: Vec<Vec<u8>> = match typ.as_str() {
                "string" => vec![store.query(redis::cmd("GET").arg(&k)).await.unwrap()],
                "hash" => store.query(redis::cmd("HGETALL").arg(&k)).await.unwrap(),
                "list" => store.query(redis::cmd("LRANGE").arg(&k).arg(0).arg(-1)).await.unwrap(),
                "zset" => store.query(redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1)).await.unwrap(),
                "set" => store.query(redis::cmd("SMEMBERS").arg(&k)).await.unwrap(),
                other => panic!("key {k} of type {other} not dumped"),
            };
            for v in values {
                out.push((k.clone(), v));
            }
        }
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

fn keys_of(tag: &str) -> Redacted {
    Redacted(PayloadCodec::new_key_entry(tag).unwrap())
}

/// With payload keys, nothing a workflow was given or produced lies in Redis as plaintext:
/// after the invoice story, an approval answered, a signal buffered and a run failed, every
/// key of the namespace is dumped and searched. The API still shows the plaintext.
#[tokio::test]
async fn payloads_are_sealed_at_rest_after_the_invoice_story() {
    let keys = keys_of("k1");
    let w = World::new("seal", |c| c.security.payload_keys = keys.clone()).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    w.wait_registered("approval").await;
    let inv = format!("INV-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let note = "note-PLAINTEXT-MARKER-input";
    let t = w.start("invoice", json!({"invoice_id": inv, "note": note})).await;
    let done = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(done["output"]["total_cents"], 125_000, "{done}");
    // The same start again is found (sealed inputs differ byte for byte).
    let (s, again) = w
        .post(
            "/v1/runs",
            json!({"workflow": "invoice", "thread_id": t.as_str(), "input": {"invoice_id": inv, "note": note}}),
        )
        .await;
    assert_eq!((s, again["status"].as_str()), (200, Some("completed")), "{again}");
    let (s, _) = w
        .post(
            "/v1/runs",
            json!({"workflow": "invoice", "thread_id": t.as_str(), "input": {"invoice_id": inv, "note": "other"}}),
        )
        .await;
    assert_eq!(s, 409, "another input under the same thread id is a conflict");

    let a = w
        .start("approval", json!({"why": "approval-PLAINTEXT-MARKER-input"}))
        .await;
    w.wait_status(&a, &["waiting"], LONG).await;
    let (s, _) = w
        .post(
            &format!("/v1/runs/{a}/signals/later"),
            json!({"value": "signal-PLAINTEXT-MARKER"}),
        )
        .await;
    assert_eq!(s, 202);
    let (s, _) = w
        .post(
            &format!("/v1/runs/{a}/resume"),
            json!({"value": "answer-PLAINTEXT-MARKER"}),
        )
        .await;
    assert_eq!(s, 202);
    let out = w.wait_status(&a, &["completed"], LONG).await;
    assert_eq!(out["output"]["log"][1], "gate=answer-PLAINTEXT-MARKER", "{out}");

    let dump = dump_namespace(&w.store, &w.cfg.namespace).await;
    assert!(dump.len() > 20, "the namespace holds the runs: {} values", dump.len());
    let sealed = dump.iter().filter(|(_, v)| v.starts_with(b"$sp1:k1:")).count();
    for marker in [
        note,
        "approval-PLAINTEXT-MARKER-input",
        "signal-PLAINTEXT-MARKER",
        "answer-PLAINTEXT-MARKER",
        "Approve this payment?",
        "consulting 1000.00",
        "total_cents",
        "125000",
    ] {
        let hits: Vec<&String> = dump
            .iter()
            .filter(|(_, v)| v.windows(marker.len()).any(|w| w == marker.as_bytes()))
            .map(|(k, _)| k)
            .collect();
        assert!(hits.is_empty(), "{marker:?} lies in plaintext in {hits:?}");
    }
    assert!(sealed >= 10, "sealed values found: {sealed}");

    // The API opens them for its callers: history and export show the plaintext.
    let (_, export) = w.get(&format!("/v1/runs/{t}/export")).await;
    assert_eq!(export["input"]["note"], note, "{export}");
    assert_eq!(
        export["journal"][0]["result"]
            .as_str()
            .map(|s| s.contains("consulting")),
        Some(true)
    );
}

/// A sealed value copied into another run or another field does not open: the read is a
/// typed error naming why, never the other run's data. A process without the key gets the
/// same error; after a rotation the old key still opens what it sealed.
#[tokio::test]
async fn sealed_values_are_bound_to_their_run_and_field_and_keys_rotate() {
    let old = keys_of("old");
    let w = World::new("bind", |c| c.security.payload_keys = old.clone()).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    let a = w.start("invoice", json!({"invoice_id": "INV-A"})).await;
    let b = w.start("invoice", json!({"invoice_id": "INV-B"})).await;
    w.wait_status(&a, &["completed"], LONG).await;
    w.wait_status(&b, &["completed"], LONG).await;
    let ka = w.store.keys().run(&a).run;
    let kb = w.store.keys().run(&b).run;
    let a_input: Vec<u8> = w.store.query(redis::cmd("HGET").arg(&ka).arg("input")).await.unwrap();
    let a_j0: Vec<u8> = w.store.query(redis::cmd("HGET").arg(&ka).arg("j:0")).await.unwrap();
    // Run B's input replaced by run A's sealed input; B's j:1 by A's j:0.
    let _: () = w
        .store
        .query(redis::cmd("HSET").arg(&kb).arg("input").arg(&a_input))
        .await
        .unwrap();
    match w.store.header(&b).await {
        Err(StoreError::Sealed(m)) => assert!(m.contains("field input") && m.contains("moved from another run"), "{m}"),
        other => panic!("a moved input opened: {other:?}"),
    }
    let (s, body) = w.get(&format!("/v1/runs/{b}")).await;
    assert_eq!(s, 500, "{body}");
    assert!(body["error"].as_str().unwrap().contains("sealed payload"), "{body}");
    let _: () = w
        .store
        .query(redis::cmd("HSET").arg(&ka).arg("j:1").arg(&a_j0))
        .await
        .unwrap();
    assert!(matches!(w.store.entry(&a, 1).await, Err(StoreError::Sealed(_))));

    // A store without keys cannot read sealed data, and says which key it lacks.
    let mut plain = w.cfg.clone();
    plain.security.payload_keys = Redacted::default();
    let keyless = ScriptStore::connect(&plain.redis_url, plain.keys(), plain.store())
        .await
        .unwrap();
    match keyless.header(&a).await {
        Err(StoreError::Sealed(m)) => assert!(m.contains("\"old\", which is not configured"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Rotation: the new key seals, the old one still opens.
    let mut rotated = w.cfg.clone();
    rotated.security.payload_keys = Redacted(format!("{},{}", keys_of("new").0, old.0));
    let store = ScriptStore::connect(&rotated.redis_url, rotated.keys(), rotated.store())
        .await
        .unwrap();
    assert_eq!(store.header(&a).await.unwrap().unwrap().input["invoice_id"], "INV-A");
    let c = ThreadId::new(format!("rot-{}", uuid::Uuid::new_v4().simple())).unwrap();
    store
        .create(&c, "invoice", 1, "{\"invoice_id\":\"INV-C\"}", "")
        .await
        .unwrap();
    let raw: Vec<u8> = store
        .query(redis::cmd("HGET").arg(store.keys().run(&c).run).arg("input"))
        .await
        .unwrap();
    assert!(raw.starts_with(b"$sp1:new:"), "{}", String::from_utf8_lossy(&raw));
    assert_eq!(store.header(&c).await.unwrap().unwrap().input["invoice_id"], "INV-C");
}

/// `{"$secret": …}` values are shown redacted by the API and the console, even to a caller
/// who may read payloads, while the workflow gets them.
#[tokio::test]
async fn secrets_are_never_shown() {
    let w = World::new("secret", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("approval").await;
    let a = w
        .start(
            "approval",
            json!({"card": {"$secret": "4242-4242-4242-4242"}, "amount": 5}),
        )
        .await;
    w.wait_status(&a, &["waiting"], LONG).await;
    let (s, _) = w
        .post(
            &format!("/v1/runs/{a}/resume"),
            json!({"value": {"$secret": "otp-991177"}}),
        )
        .await;
    assert_eq!(s, 202);
    w.wait_status(&a, &["completed"], LONG).await;
    for path in [
        format!("/v1/runs/{a}/export"),
        format!("/v1/runs/{a}/history"),
        format!("/v1/runs/{a}"),
    ] {
        let (_, v) = w.get(&path).await;
        let text = v.to_string();
        assert!(!text.contains("4242-4242"), "{path}: {text}");
    }
    let (_, export) = w.get(&format!("/v1/runs/{a}/export")).await;
    assert_eq!(export["input"], json!({"card": {"$secret": "redacted"}, "amount": 5}));
    // The journaled answer is shown redacted in history and export.
    assert_eq!(
        export["journal"][1]["result"],
        json!({"$secret": "redacted"}),
        "{export}"
    );
    let (_, history) = w.get(&format!("/v1/runs/{a}/history")).await;
    assert!(!history.to_string().contains("otp-991177"), "{history}");
    let page = w
        .http
        .get(format!("{}/ui/runs/{a}", w.sched.base_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("redacted") && !page.contains("4242-4242"),
        "console page shows the secret"
    );
    // The workflow itself got the answer: this demo formats it into its output (a string, so
    // no longer marked; in Rust code a `Secret<T>` prints as <redacted>).
    let (_, run) = w.get(&format!("/v1/runs/{a}")).await;
    assert!(
        run["output"]["log"][1].as_str().unwrap().contains("otp-991177"),
        "{run}"
    );
}

/// Limits: an oversized signal is 413, a run holding its quota of unasked signals refuses
/// more with 429, and a run whose journal would pass its byte limit fails with the reason.
#[tokio::test]
async fn limits_protect_redis_from_one_client() {
    let w = World::new("limits", |c| {
        c.max_buffered_signals = 2;
        c.scheduler.max_signal_bytes = 1024;
    })
    .await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("approval").await;
    let a = w.start("approval", json!({})).await;
    w.wait_status(&a, &["waiting"], LONG).await;
    let big = "x".repeat(2000);
    let (s, body) = w.post(&format!("/v1/runs/{a}/signals/s"), json!({"value": big})).await;
    assert_eq!(s, 413, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SAVEPOINT_MAX_SIGNAL_BYTES"),
        "{body}"
    );
    for _ in 0..2 {
        assert_eq!(
            w.post(&format!("/v1/runs/{a}/signals/s"), json!({"value": 1})).await.0,
            202
        );
    }
    let (s, body) = w.post(&format!("/v1/runs/{a}/signals/s"), json!({"value": 1})).await;
    assert_eq!(s, 429, "{body}");
    assert!(body["error"].as_str().unwrap().contains("holds 2 signals"), "{body}");
    // The answer is not a buffered signal: it still goes through.
    assert_eq!(
        w.post(&format!("/v1/runs/{a}/resume"), json!({"value": "ok"})).await.0,
        202
    );
    w.wait_status(&a, &["completed"], LONG).await;

    // A journal limit of 150 bytes: the invoice's first step result alone is larger.
    let mut small = w.cfg.clone();
    small.worker.max_journal_bytes = 150;
    let _w2 =
        savepoint_integration_tests::procs::Proc::spawn(WORKER, "small", &small, &[("SAVEPOINT_WORKER_NAME", "small")]);
    drop(_wk);
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": "INV-BIG"})).await;
    let run = w.wait_status(&t, &["failed"], LONG).await;
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .contains("journal would exceed the maximum of 150 bytes"),
        "{run}"
    );
}

/// A flow-control key taken from an input (a customer id) names no Redis key and lies in no
/// run field or event in plaintext when payload keys are on (issue 24, hole 5): while one run
/// of the customer holds the only slot and another waits in line, every key name and value
/// of the namespace is read (the demo workflow's own witness records excepted). The API
/// still shows the key.
#[tokio::test]
async fn flow_keys_from_inputs_name_no_redis_key_and_are_sealed_in_runs_and_events() {
    let keys = keys_of("k1");
    let w = World::new("sealflow", |c| c.security.payload_keys = keys.clone()).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("metered").await;
    let customer = "cust-PLAINTEXT-MARKER-flow";
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (s, r) = w
            .post(
                "/v1/runs",
                json!({"workflow": "metered", "input": {"customer": customer, "steps": 1, "step_ms": 3000},
                    "flow": {"key_from": "/customer", "limit": 1}}),
            )
            .await;
        assert_eq!(s, 201, "{r}");
        runs.push(ThreadId::new(r["thread_id"].as_str().unwrap().to_owned()).unwrap());
    }
    let waiting = loop {
        let mut found = None;
        for t in &runs {
            if w.event_types(t).await.iter().any(|e| e == "flow_waiting") {
                found = Some(t.clone());
            }
        }
        if let Some(t) = found {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let dump = dump_namespace(&w.store, &w.cfg.namespace).await;
    let flow_keys: Vec<&String> = dump.iter().map(|(k, _)| k).filter(|k| k.contains("{fc}")).collect();
    assert!(!flow_keys.is_empty(), "the slot and the line exist now");
    let hits: Vec<&String> = dump
        .iter()
        .filter(|(k, _)| !k.contains(":demo:"))
        .filter(|(k, v)| k.contains(customer) || v.windows(customer.len()).any(|x| x == customer.as_bytes()))
        .map(|(k, _)| k)
        .collect();
    assert!(
        hits.is_empty(),
        "the customer id lies in plaintext in {hits:?} (flow keys: {flow_keys:?})"
    );
    let (_, run) = w.get(&format!("/v1/runs/{waiting}")).await;
    assert_eq!(run["flow"]["key"], format!("metered:{customer}"), "{run}");
    for t in &runs {
        w.wait_status(t, &["completed"], LONG).await;
    }
}
