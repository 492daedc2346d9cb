//! The store's Lua scripts run in-process (Lua 5.1, as in Redis) over the [`Keyspace`].
//!
//! This reproduces the part of Redis's scripting environment the scripts use: `KEYS`/`ARGV`,
//! `redis.call` with Redis's argument and reply conversions (numbers become their shortest
//! decimal text; a nil bulk reply is `false`; a status reply is `{ok=…}`; an error reply raises),
//! the conversion of the script's return value (numbers truncate to integers, arrays stop at the
//! first nil, `false` is a nil reply) and `cjson.encode`/`cjson.decode`. A script is atomic
//! because the whole host sits behind one mutex; as in Redis, the writes a script made before
//! an error are kept.

use mlua::{Function, LightUserData, Lua, MultiValue, Table, Value as LuaValue, Variadic};
use redis::Value;
use std::collections::HashMap;

use super::keyspace::Keyspace;

/// The server time of the script being run (one reading per script, as Redis 7 freezes it).
#[derive(Clone, Copy)]
struct Now {
    ms: u64,
    us: u64,
}

/// A Lua state with `redis` and `cjson`, owning the keyspace.
pub(crate) struct LuaHost {
    lua: Lua,
    compiled: HashMap<&'static str, Function>,
}

fn lua_err(e: impl std::fmt::Display) -> mlua::Error {
    mlua::Error::RuntimeError(e.to_string())
}

/// A `redis.call` argument as Redis converts it (strings as they are, numbers as text).
fn arg_bytes(v: &LuaValue) -> mlua::Result<Vec<u8>> {
    match v {
        LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
        LuaValue::Integer(i) => Ok(i.to_string().into_bytes()),
        LuaValue::Number(n) => Ok(number_text(*n).into_bytes()),
        _ => Err(lua_err("Lua redis lib command arguments must be strings or integers")),
    }
}

fn number_text(n: f64) -> String {
    if n.is_finite() {
        format!("{n}")
    } else if n > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// A command reply as the Lua value Redis hands a script.
fn to_lua(lua: &Lua, v: Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Nil => LuaValue::Boolean(false),
        Value::Int(n) => LuaValue::Number(n as f64),
        Value::BulkString(b) => LuaValue::String(lua.create_string(&b)?),
        Value::SimpleString(s) => {
            let t = lua.create_table()?;
            t.set("ok", s)?;
            LuaValue::Table(t)
        }
        Value::Okay => {
            let t = lua.create_table()?;
            t.set("ok", "OK")?;
            LuaValue::Table(t)
        }
        Value::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        other => return Err(lua_err(format!("unsupported reply {other:?}"))),
    })
}

/// A script's return value as the reply Redis sends.
fn from_lua(v: LuaValue) -> Result<Value, String> {
    Ok(match v {
        LuaValue::Nil | LuaValue::Boolean(false) => Value::Nil,
        LuaValue::Boolean(true) => Value::Int(1),
        LuaValue::Integer(i) => Value::Int(i),
        LuaValue::Number(n) => Value::Int(n.trunc() as i64),
        LuaValue::String(s) => Value::BulkString(s.as_bytes().to_vec()),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Err(e.to_string_lossy());
            }
            if let Ok(LuaValue::String(s)) = t.raw_get::<LuaValue>("ok") {
                return Ok(Value::SimpleString(s.to_string_lossy()));
            }
            let mut out = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i).map_err(|e| e.to_string())? {
                    LuaValue::Nil => break,
                    item => out.push(from_lua(item)?),
                }
            }
            Value::Array(out)
        }
        other => return Err(format!("script returned an unsupported value: {}", other.type_name())),
    })
}

fn json_of(v: &LuaValue, depth: usize) -> mlua::Result<serde_json::Value> {
    use serde_json::Value as J;
    if depth > 100 {
        return Err(lua_err("Cannot serialise, excessive nesting"));
    }
    Ok(match v {
        LuaValue::Nil => J::Null,
        LuaValue::LightUserData(p) if p.0.is_null() => J::Null,
        LuaValue::Boolean(b) => J::Bool(*b),
        LuaValue::Integer(i) => J::from(*i),
        LuaValue::Number(n) if n.fract() == 0.0 && n.abs() < 1e15 => J::from(*n as i64),
        LuaValue::Number(n) => serde_json::Number::from_f64(*n)
            .map(J::Number)
            .ok_or_else(|| lua_err("Cannot serialise number: must not be NaN or Inf"))?,
        LuaValue::String(s) => J::String(s.to_string_lossy()),
        LuaValue::Table(t) => {
            let n = t.raw_len();
            let mut count = 0;
            for pair in t.pairs::<LuaValue, LuaValue>() {
                pair?;
                count += 1;
            }
            if n > 0 && count == n {
                let mut arr = Vec::with_capacity(n);
                for i in 1..=n {
                    arr.push(json_of(&t.raw_get::<LuaValue>(i)?, depth + 1)?);
                }
                J::Array(arr)
            } else {
                let mut map = serde_json::Map::new();
                for pair in t.pairs::<LuaValue, LuaValue>() {
                    let (k, v) = pair?;
                    let key = match &k {
                        LuaValue::String(s) => s.to_string_lossy(),
                        LuaValue::Integer(i) => i.to_string(),
                        LuaValue::Number(n) => number_text(*n),
                        _ => return Err(lua_err("Cannot serialise table: table key must be a number or string")),
                    };
                    map.insert(key, json_of(&v, depth + 1)?);
                }
                J::Object(map)
            }
        }
        other => {
            return Err(lua_err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    })
}

fn lua_of(lua: &Lua, j: serde_json::Value) -> mlua::Result<LuaValue> {
    use serde_json::Value as J;
    Ok(match j {
        J::Null => LuaValue::LightUserData(LightUserData(std::ptr::null_mut())),
        J::Bool(b) => LuaValue::Boolean(b),
        J::Number(n) => LuaValue::Number(n.as_f64().unwrap_or(0.0)),
        J::String(s) => LuaValue::String(lua.create_string(&s)?),
        J::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, lua_of(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        J::Object(map) => {
            let t = lua.create_table()?;
            for (k, v) in map {
                t.raw_set(k, lua_of(lua, v)?)?;
            }
            LuaValue::Table(t)
        }
    })
}

fn table_of(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

impl LuaHost {
    /// A fresh Lua state with an empty keyspace.
    pub(crate) fn new() -> mlua::Result<Self> {
        let lua = Lua::new();
        super::coverage::hook(&lua)?;
        lua.set_app_data(Keyspace::default());
        lua.set_app_data(Now { ms: 0, us: 0 });

        let redis_tbl = lua.create_table()?;
        let call = lua.create_function(|lua, args: Variadic<LuaValue>| {
            let argv: Vec<Vec<u8>> = args.iter().map(arg_bytes).collect::<mlua::Result<_>>()?;
            if argv.is_empty() {
                return Err(lua_err("Please specify at least one argument for this redis lib call"));
            }
            let now = *lua.app_data_ref::<Now>().ok_or_else(|| lua_err("no clock"))?;
            let reply = {
                let mut ks = lua.app_data_mut::<Keyspace>().ok_or_else(|| lua_err("no keyspace"))?;
                ks.exec(&argv, now.ms, now.us)
            };
            match reply {
                Ok(v) => to_lua(lua, v),
                Err(e) => Err(lua_err(e)),
            }
        })?;
        redis_tbl.set("call", call)?;
        lua.globals().set("redis", redis_tbl)?;

        let cjson = lua.create_table()?;
        cjson.set(
            "encode",
            lua.create_function(|_, v: LuaValue| serde_json::to_string(&json_of(&v, 0)?).map_err(lua_err))?,
        )?;
        cjson.set(
            "decode",
            lua.create_function(|lua, s: mlua::LuaString| {
                let j: serde_json::Value = serde_json::from_slice(&s.as_bytes()).map_err(lua_err)?;
                lua_of(lua, j)
            })?,
        )?;
        cjson.set("null", LuaValue::LightUserData(LightUserData(std::ptr::null_mut())))?;
        lua.globals().set("cjson", cjson)?;
        Ok(Self {
            lua,
            compiled: HashMap::new(),
        })
    }

    /// Runs script `name` (compiled from `body` on first use) at server time `now_us`.
    pub(crate) fn eval(
        &mut self,
        name: &'static str,
        body: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        now_us: u64,
    ) -> Result<Value, String> {
        let f = match self.compiled.get(name) {
            Some(f) => f.clone(),
            None => {
                let f = self
                    .lua
                    .load(body)
                    .set_name(format!("@{name}.lua"))
                    .into_function()
                    .map_err(|e| format!("ERR Error compiling script {name}: {e}"))?;
                self.compiled.insert(name, f.clone());
                f
            }
        };
        self.lua.set_app_data(Now {
            ms: now_us / 1000,
            us: now_us,
        });
        let run = || -> mlua::Result<LuaValue> {
            let g = self.lua.globals();
            g.set("KEYS", table_of(&self.lua, keys)?)?;
            g.set("ARGV", table_of(&self.lua, args)?)?;
            let out: MultiValue = f.call(())?;
            Ok(out.into_iter().next().unwrap_or(LuaValue::Nil))
        };
        match run() {
            Ok(v) => from_lua(v),
            Err(e) => Err(format!("ERR script {name}: {e}")),
        }
    }

    /// Runs one plain command.
    pub(crate) fn command(&mut self, args: &[Vec<u8>], now_us: u64) -> Result<Value, String> {
        let mut ks = self
            .lua
            .app_data_mut::<Keyspace>()
            .ok_or_else(|| "ERR no keyspace".to_owned())?;
        ks.exec(args, now_us / 1000, now_us)
    }
}
