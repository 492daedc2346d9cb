//! The first-day mistakes in `SAVEPOINT_REDIS_URL`, named at start-up in one line with what to
//! do (README "Start-up diagnoses"), instead of a raw client error or a retry loop that never
//! ends: a plain `redis://` URL at a Redis Cluster node, `redis+cluster://` at a single Redis,
//! a password missing or refused, a plain URL at a port that speaks TLS and a TLS URL at one
//! that does not. Each is a
//! [`StoreError::Misconfigured`], which is not transient: the process stops at once.

use std::time::Duration;

use redis::ErrorKind;
use savepoint_core::StoreError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The setting every diagnosis names.
const SETTING: &str = "SAVEPOINT_REDIS_URL";

/// How long the TLS probe waits for the server to answer a plain `PING`.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// A refused password, or none where one is required, as a diagnosis.
pub(crate) fn credentials(addr: &str, e: &redis::RedisError) -> Option<String> {
    let text = e.to_string();
    if e.code() == Some("NOAUTH") || text.contains("NOAUTH") {
        return Some(format!(
            "Redis at {addr} requires a password and {SETTING} gives none: put it in the URL \
             (redis://:PASSWORD@{addr}, or redis://USER:PASSWORD@{addr} for an ACL user)"
        ));
    }
    if text.contains("DENIED") {
        return Some(format!(
            "Redis at {addr} refuses clients from other hosts (protected mode: no password set): \
             give its default user a password (requirepass) and put it in {SETTING}, or bind it \
             to the interfaces you trust and turn protected-mode off ({text})"
        ));
    }
    let refused = e.kind() == ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS");
    refused.then(|| {
        format!(
            "Redis at {addr} refused the user or password in {SETTING} ({text}): correct them \
             (redis://USER:PASSWORD@{addr}; the default user is written redis://:PASSWORD@{addr})"
        )
    })
}

/// A failed connection to a single Redis at `addr` through a URL that is plain (`tls` false)
/// or TLS: a diagnosis when the cause is a first-day mistake, else the error as it is.
pub(crate) async fn connect_failed(addr: &str, tls: bool, e: redis::RedisError) -> StoreError {
    if let Some(d) = credentials(addr, &e) {
        return StoreError::Misconfigured(d);
    }
    let broken = e.is_io_error() || e.is_connection_dropped() || e.is_timeout();
    if !tls && broken && speaks_tls(addr).await {
        return StoreError::Misconfigured(format!(
            "Redis at {addr} speaks TLS and {SETTING} is a plain redis:// URL: use rediss://{addr} \
             (and SAVEPOINT_REDIS_TLS_CA for a private CA)"
        ));
    }
    if tls && broken && speaks_plain(addr).await {
        return StoreError::Misconfigured(format!(
            "Redis at {addr} does not speak TLS and {SETTING} is a rediss:// URL: use the port \
             that serves TLS, or redis://{addr} on a network you trust"
        ));
    }
    crate::redis_error(e)
}

/// What `INFO cluster` says of a server reached through a plain URL: a Cluster node cannot
/// serve a namespace through one connection (every key outside its slots answers `MOVED`).
pub(crate) fn plain_url_at_cluster_node(addr: &str, info: &str) -> Option<String> {
    info.lines().any(|l| l.trim() == "cluster_enabled:1").then(|| {
        format!(
            "Redis at {addr} is a Redis Cluster node and {SETTING} is a plain redis:// URL: use \
             redis+cluster://{addr} (several seed nodes may follow, comma-separated), so every \
             key goes to the node that owns its slot"
        )
    })
}

/// A `redis+cluster://` URL whose seed is a single Redis (cluster support disabled).
pub(crate) fn cluster_url_at_single_redis(seeds: &str, e: &StoreError) -> Option<String> {
    e.to_string().contains("cluster support disabled").then(|| {
        format!(
            "Redis at {seeds} is not a Redis Cluster node (cluster support disabled) and {SETTING} \
             is a redis+cluster:// URL: use redis://{seeds} for a single Redis"
        )
    })
}

/// What the server at `addr` answers a plain `PING` with: `Some(Some(byte))`, the first byte
/// of its answer; `Some(None)`, the connection closed or reset without one; `None`, no answer
/// in time or nothing listening.
async fn ping_answer(addr: &str) -> Option<Option<u8>> {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"PING\r\n").await.ok()?;
        let mut first = [0u8; 1];
        Some(match s.read(&mut first).await {
            Ok(1) => Some(first[0]),
            _ => None,
        })
    };
    tokio::time::timeout(PROBE_WAIT, probe).await.ok().flatten()
}

/// True when the server at `addr` answers a plain `PING` as Redis does (`+PONG`, or an error
/// such as `-NOAUTH`).
async fn speaks_plain(addr: &str) -> bool {
    matches!(ping_answer(addr).await, Some(Some(b'+' | b'-')))
}

/// True when the server at `addr` does not answer a plain `PING` as Redis does: it answers
/// with a TLS record (an alert or a handshake) or closes the connection without a word.
async fn speaks_tls(addr: &str) -> bool {
    matches!(ping_answer(addr).await, Some(None | Some(0x15 | 0x16)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_node_is_told_from_its_info() {
        let node = "# Cluster\r\ncluster_enabled:1\r\n";
        assert!(plain_url_at_cluster_node("h:7301", node)
            .is_some_and(|d| d.contains("redis+cluster://h:7301") && d.contains(SETTING)));
        assert!(plain_url_at_cluster_node("h:6379", "# Cluster\r\ncluster_enabled:0\r\n").is_none());
    }

    #[tokio::test]
    async fn a_port_that_closes_on_a_plain_ping_is_taken_for_tls() {
        // A server that reads the PING and closes, as a TLS listener does with plain bytes.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 16];
                let _ = s.read(&mut buf).await;
            }
        });
        assert!(speaks_tls(&addr).await);
        // One that answers as Redis does is not.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 16];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(b"+PONG\r\n").await;
                    tokio::time::sleep(Duration::from_secs(5)).await;
                });
            }
        });
        assert!(!speaks_tls(&addr).await);
        assert!(speaks_plain(&addr).await);
    }
}
