//! Security settings and mechanisms (README "Security"): API tokens and roles, the payload
//! codec that seals user payloads at rest, TLS to Redis and RabbitMQ, and [`Secret`] values
//! that are never shown.

pub use savepoint_store::codec;
mod error;
pub mod tls;
pub mod tokens;

pub use codec::{Binding, CodecError, PayloadCodec};
pub use error::SecurityError;
pub use savepoint_core::secret::{redact_secrets, shown, Redacted, Secret, SECRET_MARKER};
pub use tls::{TlsFiles, TlsMaterial};
pub use tokens::{Principal, Role, TokenSet, TokenSpec};

use serde::Deserialize;

/// `[security]` in the config file; every field also has a `SAVEPOINT_*` variable.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecuritySection {
    /// API tokens (name, role, SHA-256 digest); with none, the API is open (loopback only).
    pub api_tokens: Vec<TokenSpec>,
    /// A file of more tokens, one `name:role:sha256:<hex>` a line (a mounted Secret).
    pub api_tokens_file: String,
    /// Allow serving an open API (no tokens) on a non-loopback address.
    pub allow_open_bind: bool,
    /// Requests per second per token (per client address without auth); 0 = no limit.
    pub rate_limit_per_sec: u32,
    /// Requests a token may send at once above the rate.
    pub rate_limit_burst: u32,
    /// Payload keys, `id:base64[,id:base64…]`, the first sealing (from the environment
    /// only: `SAVEPOINT_PAYLOAD_KEYS`; never in a config file).
    #[serde(skip)]
    pub payload_keys: Redacted,
    /// A file holding the payload keys in the same form (a mounted Secret).
    pub payload_keys_file: String,
    /// TLS to Redis.
    pub redis_tls: TlsFiles,
    /// TLS to RabbitMQ.
    pub amqp_tls: TlsFiles,
}

impl SecuritySection {
    /// The configured tokens (inline and from the file).
    pub fn tokens(&self) -> Result<TokenSet, SecurityError> {
        let mut specs = self.api_tokens.clone();
        if !self.api_tokens_file.is_empty() {
            let text = std::fs::read_to_string(&self.api_tokens_file).map_err(|source| SecurityError::File {
                setting: "api_tokens_file".into(),
                path: self.api_tokens_file.clone(),
                source,
            })?;
            specs.extend(TokenSpec::parse_list(&text).map_err(|e| SecurityError::InFile {
                setting: "api_tokens_file",
                source: Box::new(e),
            })?);
        }
        TokenSet::new(&specs)
    }

    /// The payload codec, if keys are configured.
    pub fn codec(&self) -> Result<Option<PayloadCodec>, SecurityError> {
        let mut spec = self.payload_keys.0.clone();
        if !self.payload_keys_file.is_empty() {
            let text = std::fs::read_to_string(&self.payload_keys_file).map_err(|source| SecurityError::File {
                setting: "payload_keys_file".into(),
                path: self.payload_keys_file.clone(),
                source,
            })?;
            if !spec.is_empty() {
                spec.push('\n');
            }
            spec.push_str(&text);
        }
        if spec.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(PayloadCodec::parse(&spec)?))
    }
}
