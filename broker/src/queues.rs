//! Named task queues (`{ns}.q.<queue>`): one [`Broker`] per queue a process publishes to or
//! consumes from, connected (and its queue declared) on first use, so a task routed to a
//! queue no worker has declared yet is stored rather than dropped by the exchange.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::{Broker, BrokerConfig, BrokerError, Topology};

/// How long connecting to a queue first used may take before the publish is given up (the
/// run's due time then has the scanner publish it again).
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// A task queue name that is not 1–64 characters of `a-z 0-9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid task queue {0:?}: use 1-64 characters from a-z 0-9 _ -")]
pub struct InvalidQueue(pub String);

/// Checks a task queue name: 1–64 characters of `a-z 0-9 _ -`.
pub fn valid_queue(name: &str) -> Result<(), InvalidQueue> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(InvalidQueue(name.to_owned()))
    }
}

/// The task queues of one namespace, by name. Clone is cheap.
#[derive(Clone, Debug)]
pub struct Queues {
    base: BrokerConfig,
    home: String,
    /// Brokers connected so far: read on every publish (a short, uncontended lock).
    open: Arc<RwLock<HashMap<String, Broker>>>,
    /// Held while a queue is being connected, so two first uses connect it once.
    connecting: Arc<tokio::sync::Mutex<()>>,
}

impl Queues {
    /// The queues of `cfg`'s namespace; `home` (its topology's queue) is connected already.
    pub fn new(cfg: BrokerConfig, home: Broker) -> Self {
        let name = cfg.topology.queue.clone();
        let mut open = HashMap::new();
        open.insert(name.clone(), home);
        Self {
            base: cfg,
            home: name,
            open: Arc::new(RwLock::new(open)),
            connecting: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// The deployment's default queue (`SAVEPOINT_QUEUE`).
    pub fn home_name(&self) -> &str {
        &self.home
    }

    /// The broker of queue `name` (connecting and declaring it on first use).
    pub async fn get(&self, name: &str) -> Result<Broker, BrokerError> {
        if let Some(b) = self.opened(name) {
            return Ok(b);
        }
        let _one = self.connecting.lock().await;
        if let Some(b) = self.opened(name) {
            return Ok(b);
        }
        valid_queue(name).map_err(|e| BrokerError::InvalidName {
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        let topology = Topology {
            queue: name.to_owned(),
            ..self.base.topology.clone()
        };
        let cfg = BrokerConfig {
            topology,
            ..self.base.clone()
        };
        let b = Broker::connect(cfg, CONNECT_DEADLINE).await?;
        let mut open = self.open.write().unwrap_or_else(|p| p.into_inner());
        open.insert(name.to_owned(), b.clone());
        Ok(b)
    }

    fn opened(&self, name: &str) -> Option<Broker> {
        let open = self.open.read().unwrap_or_else(|p| p.into_inner());
        open.get(name).cloned()
    }

    /// Publishes to queue `name` (`None`: the default queue), confirmed.
    pub async fn publish(
        &self,
        name: Option<&str>,
        payload: &[u8],
        headers: &[(String, String)],
    ) -> Result<(), BrokerError> {
        let b = self.get(name.filter(|n| !n.is_empty()).unwrap_or(&self.home)).await?;
        b.publish(payload, headers).await
    }
}

#[cfg(test)]
mod tests {
    use super::valid_queue;

    #[test]
    fn queue_names_are_checked() {
        assert!(valid_queue("gpu").is_ok());
        assert!(valid_queue("gpu-a100_2").is_ok());
        for bad in ["", "GPU", "a.b", "a b", &"x".repeat(65)] {
            assert!(valid_queue(bad).is_err(), "{bad:?}");
        }
    }
}
