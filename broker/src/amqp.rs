//! Low-level helpers: backoff, connection setup, header conversion.

use super::error::BrokerError;
use super::topology::{self, short};
use super::BrokerConfig;
use lapin::options::ConfirmSelectOptions;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties};
use rand::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// Upper bound for a single connection attempt (TCP + AMQP handshake + declarations).
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Exponential backoff with jitter between `min` and `max`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// New backoff starting at `min` and capped at `max` (`max < min` is treated as `min`).
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            attempt: 0,
        }
    }

    /// Next delay: `min * 2^n` capped at `max`, with jitter in `[d/2, d]`.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(20)).unwrap_or(u32::MAX);
        self.attempt = self.attempt.saturating_add(1);
        let base = self.min.saturating_mul(factor).min(self.max);
        let nanos = u64::try_from(base.as_nanos()).unwrap_or(u64::MAX);
        if nanos < 2 {
            return base;
        }
        Duration::from_nanos(rand::rng().random_range(nanos / 2..=nanos))
    }

    /// Restarts from `min` (after a successful connection).
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// The broker nodes of `amqp_url`: one URL, or several separated by commas (the nodes of a
/// RabbitMQ cluster, each a full `amqp://` or `amqps://` URL).
pub(crate) fn node_urls(amqp_url: &str) -> Vec<&str> {
    amqp_url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect()
}

/// Opens a connection to the configured broker (bounded by `timeout`). With several nodes
/// it starts at a random one (so a fleet spreads over the cluster) and goes on to the next
/// while a node refuses or does not answer, each attempt bounded by its share of `timeout`.
/// The AMQP heartbeat asked for (s): RabbitMQ closes a connection that misses two, so a
/// stopped worker's pushed tasks go back to the queue within about 20–30 s.
const HEARTBEAT_SECS: u16 = 10;

pub(crate) async fn open_connection(
    cfg: &BrokerConfig,
    role: &str,
    timeout: Duration,
) -> Result<Connection, BrokerError> {
    let nodes = node_urls(&cfg.amqp_url);
    if nodes.is_empty() {
        return Err(BrokerError::InvalidConfig("the AMQP URL is empty".into()));
    }
    let start = rand::rng().random_range(0..nodes.len());
    let share = timeout / nodes.len() as u32;
    let mut last = None;
    for i in 0..nodes.len() {
        match open_node(nodes[(start + i) % nodes.len()], cfg, role, share).await {
            Ok(conn) => return Ok(conn),
            Err(e @ (BrokerError::InvalidConfig(_) | BrokerError::Refused(_))) => return Err(e),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(BrokerError::ConnectTimeout(timeout)))
}

async fn open_node(url: &str, cfg: &BrokerConfig, role: &str, timeout: Duration) -> Result<Connection, BrokerError> {
    let mut uri: AMQPUri = url
        .parse()
        .map_err(|e: String| BrokerError::InvalidConfig(format!("bad AMQP URL: {e}")))?;
    // A process that stops (SIGSTOP, a frozen VM) keeps every task the broker pushed to it
    // until the broker closes its connection: with the server's 60 s heartbeat that took
    // about 3 minutes. Asked for here unless the URL names one (`?heartbeat=N`).
    uri.query.heartbeat = uri.query.heartbeat.or(Some(HEARTBEAT_SECS));
    let whom = Whom {
        user: uri.authority.userinfo.username.clone(),
        addr: format!("{}:{}", uri.authority.host, uri.authority.port),
        vhost: uri.vhost.clone(),
        tls: url.starts_with("amqps://"),
    };
    let name = format!("savepoint {role} ({})", cfg.topology.namespace);
    let props = ConnectionProperties::default().with_connection_name(LongString::from(name));
    let connect = async {
        if url.starts_with("amqps://") {
            crate::tls::install_crypto_provider();
            let runtime = lapin::runtime::default_runtime()?;
            Connection::connect_uri_with_config(uri, props, crate::tls::amqp_config(&cfg.tls), runtime).await
        } else {
            Connection::connect_uri(uri, props).await
        }
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(match refused(&whom, &e) {
            Some(d) => BrokerError::Refused(d),
            None => BrokerError::Connect(e),
        }),
        Err(_) => Err(BrokerError::ConnectTimeout(timeout)),
    }
}

/// Who a connection logs in as, and where.
struct Whom {
    user: String,
    addr: String,
    vhost: String,
    tls: bool,
}

/// The first-day mistakes in `SAVEPOINT_AMQP_URL` that RabbitMQ answers with a refusal, as a
/// one-line diagnosis naming what to do: a refused login, a vhost that does not exist, a
/// user without permissions on it.
fn refused(w: &Whom, e: &lapin::Error) -> Option<String> {
    let text = e.to_string();
    let (user, addr, vhost) = (&w.user, &w.addr, &w.vhost);
    if text.contains("ACCESS_REFUSED") || text.contains("ACCESS-REFUSED") {
        let local = if user == "guest" {
            "; RabbitMQ's guest user may only log in over localhost"
        } else {
            ""
        };
        return Some(format!(
            "RabbitMQ at {addr} refused the login of user {user:?} (SAVEPOINT_AMQP_URL): correct the \
             user and password (amqp{}://USER:PASSWORD@{addr}/VHOST){local}",
            if w.tls { "s" } else { "" }
        ));
    }
    if text.contains("NOT_ALLOWED") && text.contains("not found") {
        return Some(format!(
            "RabbitMQ at {addr} has no vhost {vhost:?} (the path of SAVEPOINT_AMQP_URL; the default \
             vhost / is written %2f): create it (rabbitmqctl add_vhost {vhost}; rabbitmqctl \
             set_permissions -p {vhost} {user} '.*' '.*' '.*') or correct the URL"
        ));
    }
    if text.contains("NOT_ALLOWED") {
        return Some(format!(
            "RabbitMQ at {addr} does not let user {user:?} use vhost {vhost:?} (SAVEPOINT_AMQP_URL): \
             grant it (rabbitmqctl set_permissions -p {vhost} {user} '.*' '.*' '.*') ({text})"
        ));
    }
    None
}

/// A connection plus one channel on it. Dropping it closes both.
pub(crate) struct Link {
    /// The connection (kept so it lives as long as the channel).
    pub(crate) conn: Connection,
    /// The channel (in confirm mode for publisher links).
    pub(crate) channel: Channel,
    /// Incremented on each reconnect, to detect concurrent repairs.
    pub(crate) generation: u64,
}

impl Link {
    /// True while both the connection and the channel are open.
    pub(crate) fn usable(&self) -> bool {
        self.conn.status().connected() && self.channel.status().connected()
    }

    /// Best-effort graceful close of the channel and connection.
    pub(crate) async fn close(&self) {
        if self.channel.status().connected() {
            let _ = self.channel.close(200, "OK".into()).await;
        }
        if self.conn.status().connected() {
            let _ = self.conn.close(200, "OK".into()).await;
        }
    }
}

/// Connects, opens a confirm-mode channel and declares the topology (one attempt).
pub(crate) async fn open_publisher_link(cfg: &BrokerConfig, generation: u64) -> Result<Link, BrokerError> {
    let attempt = async {
        let conn = open_connection(cfg, "publisher", ATTEMPT_TIMEOUT).await?;
        let setup = async {
            let channel = conn
                .create_channel()
                .await
                .map_err(|e| BrokerError::amqp("channel.open", e))?;
            topology::declare(&channel, &cfg.topology, cfg.delivery_limit).await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| BrokerError::amqp("confirm.select", e))?;
            Ok(channel)
        };
        match setup.await {
            Ok(channel) => Ok(Link {
                conn,
                channel,
                generation,
            }),
            Err(e) => {
                abandon(&conn).await;
                Err(e)
            }
        }
    };
    match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
        Ok(r) => r,
        Err(_) => Err(BrokerError::ConnectTimeout(ATTEMPT_TIMEOUT)),
    }
}

/// Closes a connection whose setup failed (a refused declaration has closed its channel
/// already), so no half-open link outlives the error; best effort.
pub(crate) async fn abandon(conn: &Connection) {
    if conn.status().connected() {
        let _ = conn.close(200, "setup failed".into()).await;
    }
}

/// Builds an AMQP header table with long-string values.
pub(crate) fn to_field_table<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<FieldTable, BrokerError> {
    let mut table = FieldTable::default();
    for (k, v) in headers {
        table.insert(short(k)?, AMQPValue::LongString(LongString::from(v)));
    }
    Ok(table)
}

/// Renders an AMQP header table as strings (string values exact, others in Display/Debug form).
pub(crate) fn from_field_table(table: Option<&FieldTable>) -> BTreeMap<String, String> {
    table
        .map(|t| {
            t.inner()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), render(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// One AMQP value as text (strings exact, others in Display/Debug form).
pub(crate) fn render(v: &AMQPValue) -> String {
    match v {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.as_str().to_owned(),
        AMQPValue::Boolean(b) => b.to_string(),
        AMQPValue::ShortShortInt(n) => n.to_string(),
        AMQPValue::ShortShortUInt(n) => n.to_string(),
        AMQPValue::ShortInt(n) => n.to_string(),
        AMQPValue::ShortUInt(n) => n.to_string(),
        AMQPValue::LongInt(n) => n.to_string(),
        AMQPValue::LongUInt(n) => n.to_string(),
        AMQPValue::LongLongInt(n) => n.to_string(),
        AMQPValue::Timestamp(n) => n.to_string(),
        AMQPValue::Float(n) => n.to_string(),
        AMQPValue::Double(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        for _ in 0..40 {
            assert!(b.next_delay() <= Duration::from_secs(1));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
        let mut zero = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(zero.next_delay(), Duration::ZERO);
    }

    #[test]
    fn headers_round_trip() {
        let table = to_field_table([("a", "1"), ("b", "é")]).unwrap_or_default();
        let mut t2 = table.clone();
        t2.insert("n".into(), AMQPValue::LongLongInt(7));
        let map = from_field_table(Some(&t2));
        assert_eq!(map.get("a").map(String::as_str), Some("1"));
        assert_eq!(map.get("b").map(String::as_str), Some("é"));
        assert_eq!(map.get("n").map(String::as_str), Some("7"));
        assert!(to_field_table([("k".repeat(256).as_str(), "v")]).is_err());
    }
}
