//! The whole worker binary: the registry and one call. Config comes from `SAVEPOINT_*`
//! variables or `--config FILE` (see the README's configuration section).
//!
//! The shop the workflow calls is this binary's own resource, built from the worker's
//! [`Setup`](savepoint_worker::Setup): a Redis connection of its own that appends every
//! effect to the list `<namespace>:shop:calls`, so the smoke test counts at the "provider"
//! that nothing happened twice. A real shop would hold a payment provider's HTTP client the
//! same way.

use serde_json::json;
use tokio::sync::OnceCell;

use custom_worker_flows::{Fulfil, Recorded, Shop};

/// The example's shop: a list in Redis, one JSON record per applied effect.
struct RedisShop {
    client: redis::Client,
    /// Connected on first use (the registry is built before the worker runs).
    conn: OnceCell<redis::aio::MultiplexedConnection>,
    key: String,
}

impl RedisShop {
    /// A shop on the Redis at `url` (one server: `redis://` or `rediss://`), keyed under
    /// `namespace`.
    fn new(url: &str, namespace: &str) -> redis::RedisResult<Self> {
        Ok(Self {
            client: redis::Client::open(url)?,
            conn: OnceCell::new(),
            key: format!("{namespace}:shop:calls"),
        })
    }
}

impl Shop for RedisShop {
    fn record<'a>(&'a self, thread: &'a str, effect: &'a str, key: &'a str) -> Recorded<'a> {
        Box::pin(async move {
            let conn = self
                .conn
                .get_or_try_init(|| self.client.get_multiplexed_async_connection())
                .await?;
            let record = json!({"thread_id": thread, "effect": effect, "key": key}).to_string();
            let _: i64 = redis::cmd("RPUSH")
                .arg(&self.key)
                .arg(record)
                .query_async(&mut conn.clone())
                .await?;
            Ok(())
        })
    }
}

fn main() -> std::process::ExitCode {
    savepoint_worker::main_with(|setup| {
        let shop = RedisShop::new(setup.redis_url(), setup.namespace())?;
        let mut registry = savepoint::workflow::Registry::new();
        registry.register(Fulfil::new(shop));
        Ok(registry)
    })
}
