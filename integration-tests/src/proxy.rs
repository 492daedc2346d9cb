//! A TCP proxy the test controls, to cut one process off from a server (Redis, RabbitMQ)
//! while everything else still reaches it: a network partition without root or namespaces.
//!
//! `cut()` turns the proxy into a black hole: connections stay open, bytes are read but not
//! forwarded (requests hang, as behind a dead link, until the client's own timeout), and new
//! connections are accepted and held the same way. `restore()` forwards again, including what
//! was held (late delivery, as after a partition heals).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A running proxy; dropping it stops it.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl Proxy {
    /// Starts a proxy on 127.0.0.1 (a free port) in front of `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let cut = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let (c, s) = (cut.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = s.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = accepted else { continue };
                let (c, s) = (c.clone(), s.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        _ = s.cancelled() => {}
                        _ = pump(cr, sw, c.clone()) => {}
                        _ = pump(sr, cw, c) => {}
                    }
                });
            }
        });
        Self { addr, cut, stop }
    }

    /// A URL of the same scheme as `url` pointing at the proxy (`redis://127.0.0.1:<port>`).
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    /// Stops forwarding: a black hole in both directions.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Forwards again, held bytes first.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn pump(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, cut: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while cut.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
