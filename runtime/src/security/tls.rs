//! TLS to Redis (`rediss://`) and RabbitMQ (`amqps://`): a CA to trust instead of the system's
//! roots, and an optional client certificate (mutual TLS). Both ride on rustls with the ring
//! provider. A CA or certificate configured for a plaintext URL is a configuration error, never
//! a silent plaintext connection.

use serde::Deserialize;

use super::SecurityError;
pub use savepoint_core::tls::TlsMaterial;

/// PEM files for one TLS client (`[security.redis_tls]`, `[security.amqp_tls]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsFiles {
    /// CA certificate(s) to trust (PEM); empty: the system's roots.
    pub ca: String,
    /// Client certificate chain (PEM), for servers that ask for one.
    pub cert: String,
    /// The client certificate's private key (PEM, PKCS#8, SEC1 or PKCS#1).
    pub key: String,
}

impl TlsFiles {
    /// True when nothing is configured.
    pub fn is_empty(&self) -> bool {
        self.ca.is_empty() && self.cert.is_empty() && self.key.is_empty()
    }

    /// Checks the combination against the URL's scheme (`what` names the setting in errors).
    pub fn check(&self, what: &str, url_is_tls: bool) -> Result<(), SecurityError> {
        if self.cert.is_empty() != self.key.is_empty() {
            return Err(SecurityError::HalfIdentity {
                setting: what.to_owned(),
            });
        }
        if !self.is_empty() && !url_is_tls {
            return Err(SecurityError::PlaintextUrl {
                setting: what.to_owned(),
            });
        }
        Ok(())
    }

    /// Reads the files.
    pub fn load(&self, what: &str) -> Result<TlsMaterial, SecurityError> {
        let read = |path: &str, part: &str| -> Result<Option<Vec<u8>>, SecurityError> {
            if path.is_empty() {
                return Ok(None);
            }
            let bytes = std::fs::read(path).map_err(|source| SecurityError::File {
                setting: format!("{what} {part}"),
                path: path.to_owned(),
                source,
            })?;
            if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(SecurityError::NotPem {
                    setting: format!("{what} {part}"),
                    path: path.to_owned(),
                });
            }
            Ok(Some(bytes))
        };
        let ca = read(&self.ca, "ca")?;
        let identity = match (read(&self.cert, "cert")?, read(&self.key, "key")?) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        };
        Ok(TlsMaterial { ca, identity })
    }
}
