//! Error type of the broker module.

use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::ErrorKind;
use std::time::Duration;

use super::mismatch::QueueMismatch;

/// Everything that can go wrong while talking to RabbitMQ.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The broker configuration is unusable (bad URL, name too long, ...).
    #[error("invalid broker configuration: {0}")]
    InvalidConfig(String),

    /// A name or header key does not fit in an AMQP short string (255 bytes).
    #[error("invalid AMQP name {name:?}: {reason}")]
    InvalidName {
        /// The offending name (possibly truncated for display).
        name: String,
        /// Why it was rejected.
        reason: String,
    },

    /// One attempt to open a connection (and channel) to the broker failed.
    #[error("failed to connect to the AMQP broker: {0}")]
    Connect(#[source] lapin::Error),

    /// A connection attempt did not complete in time.
    #[error("connecting to the AMQP broker timed out after {0:?}")]
    ConnectTimeout(Duration),

    /// Connecting kept failing until the deadline elapsed.
    #[error("gave up connecting to the AMQP broker after {attempts} attempt(s) in {elapsed:?}: {last}")]
    GaveUp {
        /// Number of attempts made.
        attempts: u32,
        /// Time spent trying.
        elapsed: Duration,
        /// The last error seen.
        last: Box<BrokerError>,
    },

    /// An AMQP operation (declare, publish, ack, ...) failed at the channel or connection level.
    #[error("AMQP {op} failed: {source}")]
    Amqp {
        /// The operation that failed, e.g. "basic.publish" or "queue.declare ns.q.default".
        op: String,
        /// The underlying lapin error.
        #[source]
        source: lapin::Error,
    },

    /// The broker negatively acknowledged a published message (it was not stored).
    #[error("broker nacked the message published to exchange {exchange:?}")]
    Nacked {
        /// Exchange the message was published to.
        exchange: String,
    },

    /// The broker returned a mandatory message because no queue was bound for it.
    #[error("message to exchange {exchange:?} with routing key {routing_key:?} was unroutable ({reply})")]
    Unroutable {
        /// Exchange the message was published to.
        exchange: String,
        /// Routing key used.
        routing_key: String,
        /// The broker's reply text.
        reply: String,
    },

    /// The delivery could not be settled because its channel is gone (the broker will redeliver it),
    /// or because it was already settled.
    #[error("cannot {op} delivery {delivery_tag}: {reason}")]
    Settle {
        /// "ack", "requeue", ...
        op: &'static str,
        /// The delivery tag.
        delivery_tag: u64,
        /// Why it could not be settled.
        reason: &'static str,
    },

    /// The consumer (or broker) has been shut down.
    #[error("broker connection is shut down")]
    Shutdown,

    /// A queue exists with an argument this process declares differently (RabbitMQ's
    /// `PRECONDITION_FAILED - inequivalent arg`): a setting that shapes the queues, such as
    /// `SAVEPOINT_QUEUE_EXPIRES_MS`, differs between the processes of the namespace, or the
    /// queue was made by another tool or version. Not transient: the queue keeps its arguments
    /// until it is deleted.
    #[error("{0}")]
    QueueMismatch(Box<QueueMismatch>),

    /// RabbitMQ refused the connection for a reason a setting must fix (the login, the
    /// vhost, the user's permissions on it): a one-line diagnosis naming what to do. Not
    /// transient.
    #[error("{0}")]
    Refused(String),

    /// The embedded broker refused the operation (an injected fault): transient.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
}

impl BrokerError {
    /// True if retrying the same operation later (possibly after a reconnect) may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            BrokerError::InvalidConfig(_)
            | BrokerError::InvalidName { .. }
            | BrokerError::Unroutable { .. }
            | BrokerError::Settle { .. }
            | BrokerError::QueueMismatch(_)
            | BrokerError::Refused(_)
            | BrokerError::Shutdown => false,
            BrokerError::ConnectTimeout(_) | BrokerError::Nacked { .. } | BrokerError::Unavailable(_) => true,
            BrokerError::GaveUp { last, .. } => last.is_transient(),
            BrokerError::Connect(e) | BrokerError::Amqp { source: e, .. } => lapin_is_transient(e),
        }
    }

    /// Wraps a lapin error for operation `op`.
    pub(crate) fn amqp(op: impl Into<String>, source: lapin::Error) -> Self {
        BrokerError::Amqp { op: op.into(), source }
    }

    /// Wraps a failed `queue.declare` of `queue` with arguments `sent`: a
    /// [`BrokerError::QueueMismatch`] when the broker refused an inequivalent argument.
    pub(crate) fn declare(queue: &str, sent: &lapin::types::FieldTable, source: lapin::Error) -> Self {
        match QueueMismatch::from_declare(queue, sent, &source) {
            Some(m) => BrokerError::QueueMismatch(Box::new(m)),
            None => Self::amqp(format!("queue.declare {queue}"), source),
        }
    }
}

/// Classifies lapin errors: network/state problems are transient, protocol refusals
/// (access refused, precondition failed, not found, ...) are not.
pub(crate) fn lapin_is_transient(e: &lapin::Error) -> bool {
    match e.kind() {
        ErrorKind::IOError(_)
        | ErrorKind::MissingHeartbeatError
        | ErrorKind::InvalidChannelState(..)
        | ErrorKind::InvalidConnectionState(_)
        | ErrorKind::InvalidChannel(_)
        | ErrorKind::ChannelsLimitReached
        | ErrorKind::ParsingError(_)
        | ErrorKind::SerialisationError(_) => true,
        ErrorKind::ProtocolError(amqp) => matches!(
            amqp.kind(),
            AMQPErrorKind::Hard(
                AMQPHardError::CONNECTIONFORCED
                    | AMQPHardError::INTERNALERROR
                    | AMQPHardError::RESOURCEERROR
                    | AMQPHardError::FRAMEERROR
                    | AMQPHardError::UNEXPECTEDFRAME
            ) | AMQPErrorKind::Soft(AMQPSoftError::RESOURCELOCKED)
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert!(!BrokerError::Shutdown.is_transient());
        assert!(BrokerError::Nacked { exchange: "x".into() }.is_transient());
        let io = lapin::Error::from(std::io::Error::other("reset"));
        assert!(BrokerError::amqp("basic.publish", io).is_transient());
        let gave_up = BrokerError::GaveUp {
            attempts: 2,
            elapsed: Duration::from_secs(1),
            last: Box::new(BrokerError::InvalidConfig("x".into())),
        };
        assert!(!gave_up.is_transient());
        assert!(gave_up.to_string().contains("2 attempt"));
    }
}
