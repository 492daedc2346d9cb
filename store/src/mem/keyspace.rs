//! An in-memory keyspace with the Redis commands the store uses, with Redis's reply shapes.
//!
//! Only the commands the Lua scripts and the store's plain reads send are implemented, each
//! with the argument forms the store uses; anything else is an `ERR unknown command` reply,
//! so a script that starts using a new command fails loudly in the conformance suite instead
//! of silently behaving differently. Empty hashes, lists and sorted sets vanish as in Redis.

use redis::Value;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// A command error, as Redis would reply it (`ERR …`, `WRONGTYPE …`).
pub(crate) type CmdResult = Result<Value, String>;

/// A score with Redis's total order (all stored scores are finite or ±inf, never NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Debug, Clone, Default)]
struct ZSet {
    scores: HashMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl ZSet {
    fn add(&mut self, member: Vec<u8>, score: f64) -> bool {
        let fresh = match self.scores.insert(member.clone(), score) {
            Some(old) => {
                self.order.remove(&(Score(old), member.clone()));
                false
            }
            None => true,
        };
        self.order.insert((Score(score), member));
        fresh
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&(Score(old), member.to_vec()));
                true
            }
            None => false,
        }
    }
}

/// A hash's fields.
type Fields = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Data {
    Str(Vec<u8>),
    Hash(Fields),
    List(VecDeque<Vec<u8>>),
    ZSet(ZSet),
}

impl Data {
    fn bytes(&self) -> usize {
        match self {
            Data::Str(s) => s.len(),
            Data::Hash(h) => h.iter().map(|(k, v)| k.len() + v.len() + 2).sum(),
            Data::List(l) => l.iter().map(|v| v.len() + 1).sum(),
            Data::ZSet(z) => z.scores.keys().map(|m| m.len() + 9).sum(),
        }
    }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// The keyspace: values and expiry times (ms on the engine's clock).
#[derive(Debug, Default, Clone)]
pub(crate) struct Keyspace {
    data: BTreeMap<Vec<u8>, Data>,
    expires: HashMap<Vec<u8>, u64>,
}

fn text(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

fn int(a: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "ERR value is not an integer or out of range".to_owned())
}

fn float(a: &[u8]) -> Result<f64, String> {
    let s = std::str::from_utf8(a).map_err(|_| "ERR value is not a valid float".to_owned())?;
    match s.to_ascii_lowercase().as_str() {
        "+inf" | "inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        _ => s
            .parse::<f64>()
            .ok()
            .filter(|f| !f.is_nan())
            .ok_or_else(|| "ERR value is not a valid float".to_owned()),
    }
}

/// A score as Redis prints it (`%.17g`: integers without a fraction).
pub(crate) fn fmt_score(f: f64) -> String {
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f.fract() == 0.0 && f.abs() < 1e17 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// A range bound of ZRANGEBYSCORE: value and whether it is exclusive (`(`).
fn bound(a: &[u8]) -> Result<(f64, bool), String> {
    match a.first() {
        Some(b'(') => Ok((float(&a[1..]).map_err(|_| "ERR min or max is not a float")?, true)),
        _ => Ok((float(a).map_err(|_| "ERR min or max is not a float")?, false)),
    }
}

fn above(v: f64, (b, excl): (f64, bool)) -> bool {
    if excl {
        v > b
    } else {
        v >= b
    }
}

fn below(v: f64, (b, excl): (f64, bool)) -> bool {
    if excl {
        v < b
    } else {
        v <= b
    }
}

/// A range reply: members, each followed by its score `WITHSCORES`.
fn members<'a>(items: impl Iterator<Item = &'a (Score, Vec<u8>)>, with: bool) -> Value {
    let mut out = Vec::new();
    for (score, m) in items {
        out.push(bulk(m));
        if with {
            out.push(bulk(fmt_score(score.0).as_bytes()));
        }
    }
    Value::Array(out)
}

fn bulk(v: &[u8]) -> Value {
    Value::BulkString(v.to_vec())
}

/// The error reply to a command the embedded store does not know.
fn unknown(verb: &str) -> String {
    format!("ERR unknown command '{verb}' (not supported by the embedded store)")
}

fn arity(args: &[Vec<u8>], min: usize) -> Result<(), String> {
    if args.len() < min {
        Err(format!(
            "ERR wrong number of arguments for '{}' command",
            text(&args[0]).to_lowercase()
        ))
    } else {
        Ok(())
    }
}

/// Redis list/rank index normalisation: `(start, stop)` inclusive within `len`, or `None`.
fn span(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let s = if start < 0 { (len + start).max(0) } else { start };
    let e = if stop < 0 { len + stop } else { stop.min(len - 1) };
    if s > e || s >= len || e < 0 {
        None
    } else {
        Some((s as usize, e as usize))
    }
}

/// Glob match of `SCAN MATCH` / `KEYS` (`*`, `?`, literal characters).
fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

impl Keyspace {
    /// Drops `key` if its expiry time has passed.
    fn expire_if_due(&mut self, key: &[u8], now_ms: u64) {
        if self.expires.get(key).is_some_and(|at| *at <= now_ms) {
            self.expires.remove(key);
            self.data.remove(key);
        }
    }

    /// Removes every key whose expiry has passed (run before whole-keyspace reads).
    fn sweep(&mut self, now_ms: u64) {
        let due: Vec<Vec<u8>> = self
            .expires
            .iter()
            .filter(|(_, at)| **at <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.expires.remove(&k);
            self.data.remove(&k);
        }
    }

    /// Number of live keys.
    pub(crate) fn len(&mut self, now_ms: u64) -> usize {
        self.sweep(now_ms);
        self.data.len()
    }

    fn hash(&mut self, key: &[u8], now_ms: u64) -> Result<Option<&mut Fields>, String> {
        self.expire_if_due(key, now_ms);
        match self.data.get_mut(key) {
            None => Ok(None),
            Some(Data::Hash(h)) => Ok(Some(h)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn hash_or_new(&mut self, key: &[u8], now_ms: u64) -> Result<&mut Fields, String> {
        self.expire_if_due(key, now_ms);
        match self
            .data
            .entry(key.to_vec())
            .or_insert_with(|| Data::Hash(BTreeMap::new()))
        {
            Data::Hash(h) => Ok(h),
            _ => Err(WRONGTYPE.into()),
        }
    }

    fn zset(&mut self, key: &[u8], now_ms: u64) -> Result<Option<&mut ZSet>, String> {
        self.expire_if_due(key, now_ms);
        match self.data.get_mut(key) {
            None => Ok(None),
            Some(Data::ZSet(z)) => Ok(Some(z)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn list(&mut self, key: &[u8], now_ms: u64) -> Result<Option<&mut VecDeque<Vec<u8>>>, String> {
        self.expire_if_due(key, now_ms);
        match self.data.get_mut(key) {
            None => Ok(None),
            Some(Data::List(l)) => Ok(Some(l)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// Deletes `key` when its collection became empty (Redis never keeps an empty one).
    fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.data.get(key) {
            Some(Data::Hash(h)) => h.is_empty(),
            Some(Data::List(l)) => l.is_empty(),
            Some(Data::ZSet(z)) => z.scores.is_empty(),
            _ => false,
        };
        if empty {
            self.data.remove(key);
            self.expires.remove(key);
        }
    }

    fn delete(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.expire_if_due(key, now_ms);
        self.expires.remove(key);
        self.data.remove(key).is_some()
    }

    /// Runs one command (`args[0]` is the verb) at server time `now_ms`.
    pub(crate) fn exec(&mut self, args: &[Vec<u8>], now_ms: u64, now_us: u64) -> CmdResult {
        let Some(verb) = args.first() else {
            return Err("ERR empty command".into());
        };
        let verb = text(verb).to_ascii_uppercase();
        match verb.as_str() {
            "GET" | "SET" | "DEL" | "UNLINK" | "EXISTS" | "PEXPIRE" | "PERSIST" | "PTTL" => {
                self.keys_command(&verb, args, now_ms)
            }
            "HSET" | "HSETNX" | "HGET" | "HMGET" | "HGETALL" | "HKEYS" | "HLEN" | "HDEL" | "HEXISTS" | "HINCRBY" => {
                self.hash_command(&verb, args, now_ms)
            }
            "ZADD" | "ZREM" | "ZSCORE" | "ZRANK" | "ZCARD" | "ZRANGEBYSCORE" | "ZREVRANGEBYSCORE"
            | "ZREMRANGEBYSCORE" | "ZRANGE" | "ZREVRANGE" => self.zset_command(&verb, args, now_ms),
            "RPUSH" | "LTRIM" | "LRANGE" | "LLEN" => self.list_command(&verb, args, now_ms),
            "PING" | "TIME" | "SCAN" | "KEYS" | "DBSIZE" | "MEMORY" => self.server_command(&verb, args, now_ms, now_us),
            other => Err(unknown(other)),
        }
    }

    /// Strings and keys: `GET`, `SET`, `DEL`/`UNLINK`, `EXISTS`, `PEXPIRE`, `PERSIST`, `PTTL`.
    fn keys_command(&mut self, verb: &str, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        match verb {
            "GET" => {
                arity(args, 2)?;
                self.expire_if_due(&args[1], now_ms);
                match self.data.get(&args[1]) {
                    None => Ok(Value::Nil),
                    Some(Data::Str(s)) => Ok(bulk(s)),
                    Some(_) => Err(WRONGTYPE.into()),
                }
            }
            "SET" => self.set(args, now_ms),
            "DEL" | "UNLINK" => {
                arity(args, 2)?;
                let n = args[1..].iter().filter(|k| self.delete(k, now_ms)).count();
                Ok(Value::Int(n as i64))
            }
            "EXISTS" => {
                arity(args, 2)?;
                let mut n = 0;
                for k in &args[1..] {
                    self.expire_if_due(k, now_ms);
                    n += i64::from(self.data.contains_key(k));
                }
                Ok(Value::Int(n))
            }
            "PEXPIRE" => {
                arity(args, 3)?;
                let ms = int(&args[2])?;
                self.expire_if_due(&args[1], now_ms);
                if !self.data.contains_key(&args[1]) {
                    return Ok(Value::Int(0));
                }
                if ms <= 0 {
                    self.delete(&args[1], now_ms);
                } else {
                    self.expires.insert(args[1].clone(), now_ms + ms as u64);
                }
                Ok(Value::Int(1))
            }
            "PERSIST" => {
                arity(args, 2)?;
                self.expire_if_due(&args[1], now_ms);
                let had = self.data.contains_key(&args[1]) && self.expires.remove(&args[1]).is_some();
                Ok(Value::Int(i64::from(had)))
            }
            "PTTL" => {
                arity(args, 2)?;
                self.expire_if_due(&args[1], now_ms);
                if !self.data.contains_key(&args[1]) {
                    return Ok(Value::Int(-2));
                }
                Ok(Value::Int(
                    self.expires
                        .get(&args[1])
                        .map(|at| at.saturating_sub(now_ms) as i64)
                        .unwrap_or(-1),
                ))
            }
            other => Err(unknown(other)),
        }
    }

    /// Hashes: `HSET`, `HSETNX`, `HGET`, `HMGET`, `HGETALL`/`HKEYS`/`HLEN`, `HDEL`, `HEXISTS`, `HINCRBY`.
    fn hash_command(&mut self, verb: &str, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        match verb {
            "HSET" => {
                if args.len() < 4 || !args.len().is_multiple_of(2) {
                    return Err("ERR wrong number of arguments for 'hset' command".into());
                }
                let h = self.hash_or_new(&args[1], now_ms)?;
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    added += i64::from(h.insert(pair[0].clone(), pair[1].clone()).is_none());
                }
                Ok(Value::Int(added))
            }
            "HSETNX" => {
                arity(args, 4)?;
                let h = self.hash_or_new(&args[1], now_ms)?;
                if h.contains_key(&args[2]) {
                    return Ok(Value::Int(0));
                }
                h.insert(args[2].clone(), args[3].clone());
                Ok(Value::Int(1))
            }
            "HGET" => {
                arity(args, 3)?;
                Ok(match self.hash(&args[1], now_ms)?.and_then(|h| h.get(&args[2])) {
                    Some(v) => bulk(v),
                    None => Value::Nil,
                })
            }
            "HMGET" => {
                arity(args, 3)?;
                let h = self.hash(&args[1], now_ms)?;
                Ok(Value::Array(
                    args[2..]
                        .iter()
                        .map(|f| h.as_ref().and_then(|h| h.get(f)).map_or(Value::Nil, |v| bulk(v)))
                        .collect(),
                ))
            }
            "HGETALL" | "HKEYS" | "HLEN" => self.hash_read(verb, args, now_ms),
            "HDEL" => {
                arity(args, 3)?;
                let n = match self.hash(&args[1], now_ms)? {
                    Some(h) => args[2..].iter().filter(|f| h.remove(*f).is_some()).count(),
                    None => 0,
                };
                self.drop_if_empty(&args[1]);
                Ok(Value::Int(n as i64))
            }
            "HEXISTS" => {
                arity(args, 3)?;
                Ok(Value::Int(i64::from(
                    self.hash(&args[1], now_ms)?.is_some_and(|h| h.contains_key(&args[2])),
                )))
            }
            "HINCRBY" => {
                arity(args, 4)?;
                let by = int(&args[3])?;
                let h = self.hash_or_new(&args[1], now_ms)?;
                let cur = match h.get(&args[2]) {
                    Some(v) => int(v).map_err(|_| "ERR hash value is not an integer".to_owned())?,
                    None => 0,
                };
                let next = cur.checked_add(by).ok_or("ERR increment or decrement would overflow")?;
                h.insert(args[2].clone(), next.to_string().into_bytes());
                Ok(Value::Int(next))
            }
            other => Err(unknown(other)),
        }
    }

    /// Sorted sets: `ZADD`, `ZREM`, `ZSCORE`, `ZRANK`, `ZCARD`, `ZRANGEBYSCORE` and its reverse, `ZREMRANGEBYSCORE`, `ZRANGE` and its reverse.
    fn zset_command(&mut self, verb: &str, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        match verb {
            "ZADD" => {
                if args.len() < 4 || !args.len().is_multiple_of(2) {
                    return Err("ERR wrong number of arguments for 'zadd' command".into());
                }
                let pairs: Vec<(f64, Vec<u8>)> = args[2..]
                    .chunks(2)
                    .map(|p| float(&p[0]).map(|s| (s, p[1].clone())))
                    .collect::<Result<_, _>>()?;
                self.expire_if_due(&args[1], now_ms);
                let z = match self
                    .data
                    .entry(args[1].clone())
                    .or_insert_with(|| Data::ZSet(ZSet::default()))
                {
                    Data::ZSet(z) => z,
                    _ => return Err(WRONGTYPE.into()),
                };
                let added = pairs.into_iter().filter(|(s, m)| z.add(m.clone(), *s)).count();
                Ok(Value::Int(added as i64))
            }
            "ZREM" => {
                arity(args, 3)?;
                let n = match self.zset(&args[1], now_ms)? {
                    Some(z) => args[2..].iter().filter(|m| z.remove(m)).count(),
                    None => 0,
                };
                self.drop_if_empty(&args[1]);
                Ok(Value::Int(n as i64))
            }
            "ZSCORE" => {
                arity(args, 3)?;
                Ok(
                    match self.zset(&args[1], now_ms)?.and_then(|z| z.scores.get(&args[2])) {
                        Some(s) => bulk(fmt_score(*s).as_bytes()),
                        None => Value::Nil,
                    },
                )
            }
            "ZRANK" => {
                arity(args, 3)?;
                let rank = self.zset(&args[1], now_ms)?.and_then(|z| {
                    let s = *z.scores.get(&args[2])?;
                    // (Members order by score, then bytes, as in Redis.)
                    Some(z.order.range(..(Score(s), args[2].clone())).count())
                });
                Ok(rank.map_or(Value::Nil, |r| Value::Int(r as i64)))
            }
            "ZCARD" => {
                arity(args, 2)?;
                Ok(Value::Int(
                    self.zset(&args[1], now_ms)?.map_or(0, |z| z.scores.len()) as i64
                ))
            }
            "ZRANGEBYSCORE" => self.zrangebyscore(args, now_ms, false),
            "ZREVRANGEBYSCORE" => self.zrangebyscore(args, now_ms, true),
            "ZREMRANGEBYSCORE" => self.zremrangebyscore(args, now_ms),
            "ZRANGE" | "ZREVRANGE" => self.zrange(verb, args, now_ms),
            other => Err(unknown(other)),
        }
    }

    /// `ZRANGE` and `ZREVRANGE` (with `WITHSCORES`).
    fn zrange(&mut self, verb: &str, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        arity(args, 4)?;
        let (start, stop) = (int(&args[2])?, int(&args[3])?);
        let with = match args.get(4) {
            None => false,
            Some(a) if text(a).eq_ignore_ascii_case("WITHSCORES") && args.len() == 5 => true,
            Some(_) => return Err("ERR syntax error".into()),
        };
        let Some(z) = self.zset(&args[1], now_ms)? else {
            return Ok(Value::Array(vec![]));
        };
        let items: Vec<&(Score, Vec<u8>)> = if verb == "ZREVRANGE" {
            z.order.iter().rev().collect()
        } else {
            z.order.iter().collect()
        };
        let Some((s, e)) = span(start, stop, items.len()) else {
            return Ok(Value::Array(vec![]));
        };
        Ok(members(items[s..=e].iter().copied(), with))
    }

    /// `ZREMRANGEBYSCORE`.
    fn zremrangebyscore(&mut self, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        arity(args, 4)?;
        let (lo, hi) = (bound(&args[2])?, bound(&args[3])?);
        let n = match self.zset(&args[1], now_ms)? {
            Some(z) => {
                let gone: Vec<Vec<u8>> = z
                    .order
                    .iter()
                    .filter(|(s, _)| above(s.0, lo) && below(s.0, hi))
                    .map(|(_, m)| m.clone())
                    .collect();
                for m in &gone {
                    z.remove(m);
                }
                gone.len()
            }
            None => 0,
        };
        self.drop_if_empty(&args[1]);
        Ok(Value::Int(n as i64))
    }

    /// `HGETALL`, `HKEYS` and `HLEN`.
    fn hash_read(&mut self, verb: &str, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        arity(args, 2)?;
        let h = self.hash(&args[1], now_ms)?;
        let Some(h) = h else {
            return Ok(if verb == "HLEN" {
                Value::Int(0)
            } else {
                Value::Array(vec![])
            });
        };
        Ok(match verb {
            "HLEN" => Value::Int(h.len() as i64),
            "HKEYS" => Value::Array(h.keys().map(|k| bulk(k)).collect()),
            _ => Value::Array(h.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect()),
        })
    }

    /// Lists: `RPUSH`, `LTRIM`, `LRANGE`, `LLEN`.
    fn list_command(&mut self, verb: &str, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        match verb {
            "RPUSH" => {
                arity(args, 3)?;
                self.expire_if_due(&args[1], now_ms);
                let l = match self
                    .data
                    .entry(args[1].clone())
                    .or_insert_with(|| Data::List(VecDeque::new()))
                {
                    Data::List(l) => l,
                    _ => return Err(WRONGTYPE.into()),
                };
                l.extend(args[2..].iter().cloned());
                Ok(Value::Int(l.len() as i64))
            }
            "LTRIM" => {
                arity(args, 4)?;
                let (start, stop) = (int(&args[2])?, int(&args[3])?);
                if let Some(l) = self.list(&args[1], now_ms)? {
                    match span(start, stop, l.len()) {
                        Some((s, e)) => {
                            l.truncate(e + 1);
                            l.drain(..s);
                        }
                        None => l.clear(),
                    }
                }
                self.drop_if_empty(&args[1]);
                Ok(Value::Okay)
            }
            "LRANGE" => {
                arity(args, 4)?;
                let (start, stop) = (int(&args[2])?, int(&args[3])?);
                let Some(l) = self.list(&args[1], now_ms)? else {
                    return Ok(Value::Array(vec![]));
                };
                Ok(Value::Array(match span(start, stop, l.len()) {
                    Some((s, e)) => l.range(s..=e).map(|v| bulk(v)).collect(),
                    None => vec![],
                }))
            }
            "LLEN" => {
                arity(args, 2)?;
                Ok(Value::Int(self.list(&args[1], now_ms)?.map_or(0, |l| l.len()) as i64))
            }
            other => Err(unknown(other)),
        }
    }

    /// Server commands: `PING`, `TIME`, `SCAN`, `KEYS`, `DBSIZE`, `MEMORY USAGE`.
    fn server_command(&mut self, verb: &str, args: &[Vec<u8>], now_ms: u64, now_us: u64) -> CmdResult {
        match verb {
            "PING" => Ok(Value::SimpleString("PONG".into())),
            "TIME" => Ok(Value::Array(vec![
                bulk((now_us / 1_000_000).to_string().as_bytes()),
                bulk((now_us % 1_000_000).to_string().as_bytes()),
            ])),
            "SCAN" | "KEYS" => {
                arity(args, 2)?;
                self.sweep(now_ms);
                let pattern = if verb == "KEYS" {
                    Some(args[1].clone())
                } else {
                    args.iter()
                        .position(|a| text(a).eq_ignore_ascii_case("MATCH"))
                        .and_then(|i| args.get(i + 1).cloned())
                };
                let keys: Vec<Value> = self
                    .data
                    .keys()
                    .filter(|k| pattern.as_ref().is_none_or(|p| glob(p, k)))
                    .map(|k| bulk(k))
                    .collect();
                // One pass returns everything: cursor 0 ends the iteration.
                Ok(if verb == "KEYS" {
                    Value::Array(keys)
                } else {
                    Value::Array(vec![bulk(b"0"), Value::Array(keys)])
                })
            }
            "DBSIZE" => Ok(Value::Int(self.len(now_ms) as i64)),
            "MEMORY" => {
                arity(args, 3)?;
                if !text(&args[1]).eq_ignore_ascii_case("USAGE") {
                    return Err("ERR unknown subcommand".into());
                }
                self.expire_if_due(&args[2], now_ms);
                Ok(match self.data.get(&args[2]) {
                    // Key, value and a fixed per-key overhead: an estimate, not Redis's figure.
                    Some(d) => Value::Int((args[2].len() + d.bytes() + 56) as i64),
                    None => Value::Nil,
                })
            }
            other => Err(unknown(other)),
        }
    }

    fn set(&mut self, args: &[Vec<u8>], now_ms: u64) -> CmdResult {
        arity(args, 3)?;
        let (mut px, mut nx) = (None, false);
        let mut i = 3;
        while i < args.len() {
            match text(&args[i]).to_ascii_uppercase().as_str() {
                "PX" => {
                    let ms = int(args.get(i + 1).ok_or("ERR syntax error")?)?;
                    if ms <= 0 {
                        return Err("ERR invalid expire time in 'set' command".into());
                    }
                    px = Some(ms as u64);
                    i += 2;
                }
                "NX" => {
                    nx = true;
                    i += 1;
                }
                _ => return Err("ERR syntax error".into()),
            }
        }
        self.expire_if_due(&args[1], now_ms);
        if nx && self.data.contains_key(&args[1]) {
            return Ok(Value::Nil);
        }
        self.data.insert(args[1].clone(), Data::Str(args[2].clone()));
        match px {
            Some(ms) => self.expires.insert(args[1].clone(), now_ms + ms),
            None => self.expires.remove(&args[1]),
        };
        Ok(Value::Okay)
    }

    /// `ZRANGEBYSCORE key min max …`, or with `rev` `ZREVRANGEBYSCORE key max min …`
    /// (highest first).
    fn zrangebyscore(&mut self, args: &[Vec<u8>], now_ms: u64, rev: bool) -> CmdResult {
        arity(args, 4)?;
        let (lo, hi) = if rev {
            (bound(&args[3])?, bound(&args[2])?)
        } else {
            (bound(&args[2])?, bound(&args[3])?)
        };
        let (mut with, mut offset, mut count) = (false, 0usize, usize::MAX);
        let mut i = 4;
        while i < args.len() {
            match text(&args[i]).to_ascii_uppercase().as_str() {
                "WITHSCORES" => {
                    with = true;
                    i += 1;
                }
                "LIMIT" => {
                    let o = int(args.get(i + 1).ok_or("ERR syntax error")?)?;
                    let c = int(args.get(i + 2).ok_or("ERR syntax error")?)?;
                    offset = o.max(0) as usize;
                    count = if c < 0 { usize::MAX } else { c as usize };
                    i += 3;
                }
                _ => return Err("ERR syntax error".into()),
            }
        }
        let Some(z) = self.zset(&args[1], now_ms)? else {
            return Ok(Value::Array(vec![]));
        };
        let order: Box<dyn Iterator<Item = &(Score, Vec<u8>)>> = if rev {
            Box::new(z.order.iter().rev())
        } else {
            Box::new(z.order.iter())
        };
        let hits = order
            .filter(|(s, _)| above(s.0, lo) && below(s.0, hi))
            .skip(offset)
            .take(count);
        Ok(members(hits, with))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ks: &mut Keyspace, now: u64, args: &[&str]) -> CmdResult {
        let a: Vec<Vec<u8>> = args.iter().map(|s| s.as_bytes().to_vec()).collect();
        ks.exec(&a, now, now * 1000)
    }

    #[test]
    fn expiry_and_empty_collections_follow_redis() {
        let mut ks = Keyspace::default();
        run(&mut ks, 0, &["SET", "a", "1", "PX", "10"]).unwrap();
        assert_eq!(
            run(&mut ks, 5, &["GET", "a"]).unwrap(),
            Value::BulkString(b"1".to_vec())
        );
        assert_eq!(run(&mut ks, 10, &["GET", "a"]).unwrap(), Value::Nil);
        run(&mut ks, 0, &["HSET", "h", "f", "v"]).unwrap();
        run(&mut ks, 0, &["HDEL", "h", "f"]).unwrap();
        assert_eq!(run(&mut ks, 0, &["EXISTS", "h"]).unwrap(), Value::Int(0));
        assert!(run(&mut ks, 0, &["RPUSH", "h2", "x"]).is_ok());
        assert!(run(&mut ks, 0, &["HGET", "h2", "x"])
            .unwrap_err()
            .starts_with("WRONGTYPE"));
    }

    #[test]
    fn sorted_set_ranges_and_limits() {
        let mut ks = Keyspace::default();
        run(&mut ks, 0, &["ZADD", "z", "3", "c", "1", "a", "2", "b", "2", "a2"]).unwrap();
        let r = run(&mut ks, 0, &["ZRANGEBYSCORE", "z", "-inf", "2", "LIMIT", "0", "2"]).unwrap();
        assert_eq!(r, Value::Array(vec![bulk(b"a"), bulk(b"a2")]));
        // Rank: by score, then member bytes; none for a stranger.
        assert_eq!(run(&mut ks, 0, &["ZRANK", "z", "a"]).unwrap(), Value::Int(0));
        assert_eq!(run(&mut ks, 0, &["ZRANK", "z", "b"]).unwrap(), Value::Int(2));
        assert_eq!(run(&mut ks, 0, &["ZRANK", "z", "c"]).unwrap(), Value::Int(3));
        assert_eq!(run(&mut ks, 0, &["ZRANK", "z", "x"]).unwrap(), Value::Nil);
        let r = run(&mut ks, 0, &["ZREVRANGEBYSCORE", "z", "(3", "-inf", "LIMIT", "0", "1"]).unwrap();
        assert_eq!(r, Value::Array(vec![bulk(b"b")]));
        let r = run(&mut ks, 0, &["ZREVRANGE", "z", "0", "0", "WITHSCORES"]).unwrap();
        assert_eq!(r, Value::Array(vec![bulk(b"c"), bulk(b"3")]));
        assert_eq!(
            run(&mut ks, 0, &["ZREMRANGEBYSCORE", "z", "(1", "2"]).unwrap(),
            Value::Int(2)
        );
        assert_eq!(run(&mut ks, 0, &["ZCARD", "z"]).unwrap(), Value::Int(2));
    }

    #[test]
    fn list_trim_keeps_the_tail() {
        let mut ks = Keyspace::default();
        run(&mut ks, 0, &["RPUSH", "l", "1", "2", "3", "4"]).unwrap();
        run(&mut ks, 0, &["LTRIM", "l", "-2", "-1"]).unwrap();
        assert_eq!(
            run(&mut ks, 0, &["LRANGE", "l", "0", "-1"]).unwrap(),
            Value::Array(vec![bulk(b"3"), bulk(b"4")])
        );
    }
}
