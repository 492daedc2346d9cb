//! The embedded keyspace against a real Redis, command by command: the same seeded random
//! sequence of every command the store's scripts and reads send, on both, with the replies
//! compared. This is the rule that keeps the backends equal at the bottom: the Lua scripts are
//! the same files on both, so the store can only differ where a command does.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use savepoint_integration_tests::{embedded_config, fresh_namespace, services};
use savepoint_store::mem::MemEngine;
use savepoint_store::ScriptStore;

/// A reply in a comparable form: field/value replies of hashes sorted (Redis returns a small
/// hash in insertion order, a large one in hash order: callers never rely on it), TTLs
/// reduced to their sign, errors to whether they are WRONGTYPE.
fn normal(verb: &str, r: Result<Value, String>) -> String {
    let v = match r {
        Err(e) => return format!("error (wrong type: {})", e.to_ascii_lowercase().contains("wrongtype")),
        Ok(v) => v,
    };
    match (verb, v) {
        ("PTTL", Value::Int(n)) => format!("ttl {}", n.signum()),
        ("HGETALL", Value::Array(items)) => {
            let mut pairs: Vec<String> = items.chunks(2).map(|p| format!("{:?}", p)).collect();
            pairs.sort();
            format!("{pairs:?}")
        }
        ("HKEYS", Value::Array(mut items)) => {
            items.sort_by_key(|v| format!("{v:?}"));
            format!("{items:?}")
        }
        (_, v) => format!("{v:?}"),
    }
}

fn command(rng: &mut StdRng, ns: &str) -> (String, Vec<String>) {
    let h = format!("{ns}:h{}", rng.random_range(0..2));
    let z = format!("{ns}:z{}", rng.random_range(0..2));
    let l = format!("{ns}:l{}", rng.random_range(0..2));
    let s = format!("{ns}:s{}", rng.random_range(0..2));
    // Sometimes a key of another type: WRONGTYPE must match too.
    let any = [&h, &z, &l, &s][rng.random_range(0..4)].clone();
    let f = format!("f{}", rng.random_range(0..4));
    let m = format!("m{}", rng.random_range(0..5));
    let score = (rng.random_range(0..20) as f64 / 2.0).to_string();
    let n = |rng: &mut StdRng, lo: i64, hi: i64| rng.random_range(lo..hi).to_string();
    let (verb, args): (&str, Vec<String>) = match rng.random_range(0..28) {
        0 => ("HSET", vec![h, f, n(rng, 0, 9)]),
        1 => ("HSET", vec![h, f, n(rng, 0, 9), "g".into(), "x".into()]),
        2 => ("HGET", vec![any, f]),
        3 => ("HMGET", vec![h, f, "f1".into(), "nope".into()]),
        4 => ("HDEL", vec![h, f, "f2".into()]),
        5 => ("HINCRBY", vec![h, f, n(rng, -3, 4)]),
        6 => ("HGETALL", vec![any]),
        7 => ("HKEYS", vec![h]),
        8 => ("HEXISTS", vec![h, f]),
        9 => ("HSETNX", vec![h, f, "nx".into()]),
        10 => ("ZADD", vec![z, score, m]),
        11 => ("ZREM", vec![z, m, "m9".into()]),
        12 => ("ZSCORE", vec![any, m]),
        13 => (
            "ZRANGEBYSCORE",
            vec![
                z,
                "-inf".into(),
                n(rng, 0, 10),
                "LIMIT".into(),
                "0".into(),
                n(rng, 1, 4),
            ],
        ),
        14 => (
            "ZRANGEBYSCORE",
            vec![z, format!("({}", n(rng, 0, 5)), "+inf".into(), "WITHSCORES".into()],
        ),
        15 => ("ZREMRANGEBYSCORE", vec![z, "-inf".into(), n(rng, 0, 6)]),
        16 => ("ZRANGE", vec![z, n(rng, -3, 2), n(rng, -2, 4)]),
        17 => ("ZREVRANGE", vec![z, "0".into(), n(rng, 0, 3), "WITHSCORES".into()]),
        18 => ("RPUSH", vec![l, n(rng, 0, 99), n(rng, 0, 99)]),
        19 => ("LTRIM", vec![l, n(rng, -4, 2), n(rng, -2, 5)]),
        20 => ("LRANGE", vec![any, n(rng, -5, 2), n(rng, -1, 6)]),
        21 => ("LLEN", vec![l]),
        22 => ("SET", vec![s, n(rng, 0, 9)]),
        23 => ("SET", vec![s, "nx".into(), "NX".into()]),
        24 => ("GET", vec![any]),
        25 => ("DEL", vec![any]),
        26 => ("PEXPIRE", vec![any, "100000".into()]),
        _ => ("PTTL", vec![any]),
    };
    (verb.to_owned(), args)
}

async fn run(store: &ScriptStore, verb: &str, args: &[String]) -> Result<Value, String> {
    let mut cmd = redis::cmd(verb);
    for a in args {
        cmd.arg(a);
    }
    store.query::<Value>(&cmd).await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn every_command_answers_as_redis_does() {
    let ns = fresh_namespace("ks");
    let cfg = services().await.config(&ns);
    let redis = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .expect("redis");
    let ecfg = embedded_config(&ns);
    let mem = ScriptStore::embedded(MemEngine::new(), ecfg.keys(), ecfg.store());
    let mut rng = StdRng::seed_from_u64(20261201);
    let mut verbs = std::collections::BTreeSet::new();
    for i in 0..3000 {
        let (verb, args) = command(&mut rng, &ns);
        let a = normal(&verb, run(&redis, &verb, &args).await);
        let b = normal(&verb, run(&mem, &verb, &args).await);
        assert_eq!(a, b, "command {i}: {verb} {args:?}");
        verbs.insert(verb);
    }
    assert_eq!(verbs.len(), 25, "{verbs:?}");
    redis.purge_namespace().await.expect("cleanup");
}
