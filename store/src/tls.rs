//! TLS to Redis (`rediss://`, and on a cluster every node) on rustls with the ring provider.

use savepoint_core::tls::TlsMaterial;

/// Makes ring the process's rustls provider (once; the first caller wins, later calls are
/// no-ops). The broker does the same for its AMQP client.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The redis-rs form of the material.
pub fn redis_certs(tls: &TlsMaterial) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls.identity.as_ref().map(|(c, k)| redis::ClientTlsConfig {
            client_cert: c.clone(),
            client_key: k.clone(),
        }),
        root_cert: tls.ca.clone(),
    }
}
