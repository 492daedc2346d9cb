//! Why a security setting was refused.

use super::CodecError;

/// Why a security setting was refused (README "Security"). Each message names the setting and
/// what to do; a configuration holding one fails at start-up (`ConfigError::Security`).
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A token entry is not `name:role:sha256`.
    #[error("{line:?}: expected name:role:sha256")]
    TokenShape {
        /// The entry.
        line: String,
    },
    /// A token's role is not `read`, `operate` or `admin`.
    #[error("{line:?}: role must be read, operate or admin")]
    TokenRole {
        /// The entry.
        line: String,
    },
    /// A token's name is empty, longer than 64 characters, or has others than `A-Z a-z 0-9 _ - . @`.
    #[error("token name {name:?} must be 1-64 characters of A-Z a-z 0-9 _ - . @")]
    TokenName {
        /// The name.
        name: String,
    },
    /// A token's digest is not 64 hex digits.
    #[error("token {name:?}: sha256 must be 64 hex digits (make one with `savepoint token new`)")]
    TokenDigest {
        /// The token's name.
        name: String,
    },
    /// Two tokens share a name (the name is what the run's events record).
    #[error("token name {name:?} is configured twice")]
    TokenTwice {
        /// The name.
        name: String,
    },
    /// A file a setting names could not be read.
    #[error("{setting} {path}: {source}")]
    File {
        /// The setting (`api_tokens_file`, `redis_tls ca`, …).
        setting: String,
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// An entry of a file a setting names was refused.
    #[error("{setting}: {source}")]
    InFile {
        /// The setting.
        setting: &'static str,
        /// Why.
        source: Box<SecurityError>,
    },
    /// The payload keys do not parse.
    #[error("{0}")]
    PayloadKeys(#[from] CodecError),
    /// A client certificate without its key, or a key without its certificate.
    #[error("{setting}: a client certificate needs both cert and key")]
    HalfIdentity {
        /// The setting (`redis_tls`, `amqp_tls`).
        setting: String,
    },
    /// TLS files configured for a URL that is not a TLS URL: never a silent plaintext connection.
    #[error("{setting} is set but the URL is not a TLS URL (rediss:// or amqps://): refusing to connect in plaintext")]
    PlaintextUrl {
        /// The setting (`redis_tls`, `amqp_tls`).
        setting: String,
    },
    /// A TLS file that is not PEM.
    #[error("{setting} {path}: not a PEM file")]
    NotPem {
        /// The setting and part (`redis_tls ca`, …).
        setting: String,
        /// The file.
        path: String,
    },
}
