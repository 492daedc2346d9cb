//! A queue that already exists with other arguments than this process declares: RabbitMQ
//! refuses the declaration with `PRECONDITION_FAILED - inequivalent arg 'x-…'` (and closes the
//! channel). [`QueueMismatch`] turns that into an error that names the setting behind the
//! argument, the value this process has, the value the queue has, and what to do.

use std::fmt;

use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::FieldTable;
use lapin::ErrorKind;

/// The setting that sets `x-expires` on every queue of a namespace.
pub const QUEUE_EXPIRES_SETTING: &str = "SAVEPOINT_QUEUE_EXPIRES_MS";

/// A queue exists with an argument this process would declare differently. Queue arguments
/// cannot change after declaration, so every process that declares a namespace's queues
/// (workers, scheduler, CLI) must agree on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMismatch {
    /// The queue, e.g. `"ns.q.default"`.
    pub queue: String,
    /// The argument that differs, e.g. `"x-expires"`.
    pub arg: String,
    /// The value this process declares (`None`: it leaves the argument off).
    pub declared: Option<String>,
    /// The value the queue has, as the broker reported it (`None`: it has none, or the
    /// broker's reply could not be read).
    pub current: Option<String>,
    /// The virtual host, as the broker reported it (for the `rabbitmqctl` command).
    pub vhost: Option<String>,
    /// The broker's reply text, verbatim.
    pub reply: String,
}

impl QueueMismatch {
    /// Reads a failed `queue.declare` of `queue` with arguments `sent`: `Some` when the broker
    /// refused it as an inequivalent argument, `None` for any other failure.
    pub(crate) fn from_declare(queue: &str, sent: &FieldTable, e: &lapin::Error) -> Option<Self> {
        let ErrorKind::ProtocolError(amqp) = e.kind() else {
            return None;
        };
        if *amqp.kind() != AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) {
            return None;
        }
        Self::from_reply(queue, sent, amqp.get_message().as_str())
    }

    /// [`QueueMismatch::from_declare`] on the reply text alone.
    fn from_reply(queue: &str, sent: &FieldTable, reply: &str) -> Option<Self> {
        let arg = between(reply, "inequivalent arg '", "'")?;
        let declared = sent
            .inner()
            .iter()
            .find(|(k, _)| k.as_str() == arg)
            .map(|(_, v)| crate::amqp::render(v));
        let current = reply
            .split_once("but current is ")
            .and_then(|(_, rest)| quoted_value(rest));
        Some(QueueMismatch {
            queue: queue.to_owned(),
            arg: arg.to_owned(),
            declared,
            current,
            vhost: between(reply, "in vhost '", "'").map(str::to_owned),
            reply: reply.to_owned(),
        })
    }

    /// The setting behind the argument, if a setting sets it (`x-expires`:
    /// `SAVEPOINT_QUEUE_EXPIRES_MS`).
    pub fn setting(&self) -> Option<&'static str> {
        (self.arg == "x-expires").then_some(QUEUE_EXPIRES_SETTING)
    }

    /// The command that deletes the queue.
    pub fn delete_command(&self) -> String {
        let vhost = self.vhost.as_deref().unwrap_or("/");
        format!("rabbitmqctl delete_queue -p '{vhost}' '{}'", self.queue)
    }

    /// The namespace's queues besides this one that carry the same arguments.
    fn siblings(&self) -> String {
        match self
            .queue
            .split_once(".q.")
            .map(|(ns, _)| ns)
            .or(self.queue.strip_suffix(".dlq"))
        {
            Some(ns) => format!("every `{ns}.q.*` queue and `{ns}.dlq`"),
            None => "the namespace's other queues".to_owned(),
        }
    }

    /// Why the argument differs, and what fixes it.
    fn cause(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let declared = self.declared.as_deref();
        match (self.arg.as_str(), self.setting()) {
            ("x-expires", Some(setting)) => {
                let ours = declared.unwrap_or("0");
                let theirs = self.current.as_deref().unwrap_or("0");
                write!(
                    f,
                    "this process has {setting}={ours} (`queue_expires_ms`; 0 leaves x-expires off), \
                     the queue was declared with {setting}={theirs}. {setting} must be the same in \
                     every process that declares the namespace's queues (workers, scheduler, CLI): \
                     set {setting}={theirs} here, or"
                )
            }
            ("x-queue-type", _) => write!(
                f,
                "Savepoint declares quorum queues; this one was made as {} by another tool or an \
                 older version. To use it,",
                self.current.as_deref().unwrap_or("another type")
            ),
            (arg, _) => write!(
                f,
                "this Savepoint declares {arg}={}; the queue was made with {arg}={} by another tool \
                 or another Savepoint version. To use it,",
                declared.unwrap_or("none"),
                self.current.as_deref().unwrap_or("none")
            ),
        }
    }
}

impl fmt::Display for QueueMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "queue `{}` exists with another {} than this process declares: ",
            self.queue, self.arg
        )?;
        self.cause(f)?;
        write!(
            f,
            " stop the processes of the namespace and delete the queue, so the next start declares it \
             again: `{}` (then {}; runs whose tasks were in a task queue are published again from \
             Redis by the due scanner, messages in the dead-letter queue are lost). The broker said: {}",
            self.delete_command(),
            self.siblings(),
            self.reply
        )
    }
}

/// The text between `start` and the next `end` in `s`.
fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let (_, rest) = s.split_once(start)?;
    rest.split_once(end).map(|(v, _)| v)
}

/// A value as RabbitMQ writes it: `none`, `'V'` or `the value 'V' of type 'T'`.
fn quoted_value(s: &str) -> Option<String> {
    if s.starts_with("none") {
        return None;
    }
    between(s, "'", "'").map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::AMQPValue;

    fn sent(expires: Option<i32>) -> FieldTable {
        let mut t = FieldTable::default();
        if let Some(ms) = expires {
            t.insert("x-expires".into(), AMQPValue::LongInt(ms));
        }
        t
    }

    const TYPED: &str = "PRECONDITION_FAILED - inequivalent arg 'x-expires' for queue 'ns.q.default' in \
                         vhost '/': received the value '1000' of type 'signedint' but current is the \
                         value '300000' of type 'signedint'";

    #[test]
    fn an_expires_mismatch_names_the_setting_both_values_and_the_command() {
        let m = QueueMismatch::from_reply("ns.q.default", &sent(Some(1000)), TYPED).expect("a mismatch");
        assert_eq!(m.arg, "x-expires");
        assert_eq!(m.declared.as_deref(), Some("1000"));
        assert_eq!(m.current.as_deref(), Some("300000"));
        assert_eq!(m.setting(), Some(QUEUE_EXPIRES_SETTING));
        let text = m.to_string();
        for want in [
            "SAVEPOINT_QUEUE_EXPIRES_MS=1000",
            "SAVEPOINT_QUEUE_EXPIRES_MS=300000",
            "must be the same in every process",
            "rabbitmqctl delete_queue -p '/' 'ns.q.default'",
            "`ns.q.*`",
            "`ns.dlq`",
            TYPED,
        ] {
            assert!(text.contains(want), "{want:?} missing from: {text}");
        }
    }

    #[test]
    fn an_absent_value_on_either_side_reads_as_zero() {
        let reply = "PRECONDITION_FAILED - inequivalent arg 'x-expires' for queue 'ns.dlq' in vhost 'v': \
                     received none but current is the value '300000' of type 'signedint'";
        let m = QueueMismatch::from_reply("ns.dlq", &sent(None), reply).expect("a mismatch");
        assert_eq!((m.declared.as_deref(), m.current.as_deref()), (None, Some("300000")));
        assert!(m.to_string().contains("SAVEPOINT_QUEUE_EXPIRES_MS=0"), "{m}");
        assert!(m.to_string().contains("-p 'v' 'ns.dlq'"), "{m}");
        let reply = "PRECONDITION_FAILED - inequivalent arg 'x-expires' for queue 'ns.q.a' in vhost '/': \
                     received '1000' but current is none";
        let m = QueueMismatch::from_reply("ns.q.a", &sent(Some(1000)), reply).expect("a mismatch");
        assert_eq!((m.declared.as_deref(), m.current.as_deref()), (Some("1000"), None));
        assert!(
            m.to_string().contains("declared with SAVEPOINT_QUEUE_EXPIRES_MS=0"),
            "{m}"
        );
    }

    #[test]
    fn other_arguments_are_named_without_a_setting() {
        let reply = "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue 'ns.q.a' in \
                     vhost '/': received the value 'ns.dlx' of type 'longstr' but current is none";
        let mut t = sent(None);
        t.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("ns.dlx".into()));
        let m = QueueMismatch::from_reply("ns.q.a", &t, reply).expect("a mismatch");
        assert_eq!(m.setting(), None);
        let text = m.to_string();
        assert!(text.contains("x-dead-letter-exchange=ns.dlx"), "{text}");
        assert!(text.contains("rabbitmqctl delete_queue"), "{text}");
        let reply = "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'ns.q.a' in vhost '/': \
                     received the value 'quorum' of type 'longstr' but current is the value 'classic' of type 'longstr'";
        let m = QueueMismatch::from_reply("ns.q.a", &t, reply).expect("a mismatch");
        assert!(m.to_string().contains("made as classic"), "{m}");
    }

    #[test]
    fn other_refusals_are_not_mismatches() {
        assert!(QueueMismatch::from_reply("q", &sent(None), "PRECONDITION_FAILED - queue is exclusive").is_none());
        let io = lapin::Error::from(std::io::Error::other("reset"));
        assert!(QueueMismatch::from_declare("q", &sent(None), &io).is_none());
        let refused = |kind, text: &str| {
            let amqp = lapin::protocol::AMQPError::new(kind, text.to_owned().into());
            lapin::Error::from(ErrorKind::ProtocolError(amqp))
        };
        let precondition = AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED);
        let m = QueueMismatch::from_declare("ns.q.default", &sent(Some(1000)), &refused(precondition, TYPED));
        assert_eq!(m.map(|m| m.arg), Some("x-expires".to_owned()));
        let denied = AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED);
        assert!(QueueMismatch::from_declare("q", &sent(None), &refused(denied, TYPED)).is_none());
    }
}
