//! The PEM material of one TLS client (Redis or RabbitMQ), read once at start by the process
//! runtime and handed to the store and the broker, which build their clients' configs from it.

/// The files' contents, read once at start.
#[derive(Clone, Default)]
pub struct TlsMaterial {
    /// The CA's PEM.
    pub ca: Option<Vec<u8>>,
    /// The client certificate's PEM and its key's PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca", &self.ca.is_some())
            .field("client_cert", &self.identity.is_some())
            .finish()
    }
}
