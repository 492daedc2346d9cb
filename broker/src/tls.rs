//! TLS to RabbitMQ (`amqps://`) on rustls with the ring provider.

use savepoint_core::tls::TlsMaterial;

/// Makes ring the process's rustls provider (once; the first caller wins, later calls are
/// no-ops). The store does the same for its Redis client.
// rustls 0.23.48 deprecates the ring provider (no post-quantum key exchange). Ring is the
// provider lapin and redis are built with here (their `rustls--ring` / `tls-rustls`
// features); moving both to aws-lc-rs is a change of those features, not of this call. Allowed
// so that an app built against the newest compatible rustls builds Savepoint without warnings
// (CI checks that: `.ci/run`'s side build "newest compatible dependencies").
#[allow(deprecated)]
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The lapin form of the material.
pub fn amqp_config(tls: &TlsMaterial) -> lapin::tcp::OwnedTLSConfig {
    lapin::tcp::OwnedTLSConfig {
        identity: tls.identity.as_ref().map(|(c, k)| lapin::tcp::OwnedIdentity::PKCS8 {
            pem: c.clone(),
            key: k.clone(),
        }),
        cert_chain: tls.ca.as_ref().map(|c| String::from_utf8_lossy(c).into_owned()),
    }
}
