//! TLS to Redis (`rediss://`, and on a cluster every node) on rustls with the ring provider.

use savepoint_core::tls::TlsMaterial;

/// Makes ring the process's rustls provider (once; the first caller wins, later calls are
/// no-ops). The broker does the same for its AMQP client.
// rustls 0.23.48 deprecates the ring provider (no post-quantum key exchange). Ring is the
// provider lapin and redis are built with here (their `rustls--ring` / `tls-rustls`
// features); moving both to aws-lc-rs is a change of those features, not of this call. Allowed
// so that an app built against the newest compatible rustls builds Savepoint without warnings
// (CI checks that: `.ci/run`'s side build "newest compatible dependencies").
#[allow(deprecated)]
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
