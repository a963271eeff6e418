//! The caretakers' way to the API server: a TCP proxy on 127.0.0.1 that passes bytes both
//! ways until it is told to stall, then holds every connection open and silent (new ones
//! too), as a broken middlebox or a wedged server leaves them, until told to pass again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone)]
pub struct Proxy {
    pub port: u16,
    stalled: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on a free port and forwards to `upstream` on 127.0.0.1.
    pub async fn start(upstream: u16) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Proxy {
            port: listener.local_addr()?.port(),
            stalled: Arc::new(AtomicBool::new(false)),
        };
        let stalled = proxy.stalled.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let stalled = stalled.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return; // the API server is down: the client sees the connection close
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::select! {
                        _ = pump(client_read, server_write, stalled.clone()) => {}
                        _ = pump(server_read, client_write, stalled) => {}
                    }
                });
            }
        });
        Ok(proxy)
    }

    pub fn stall(&self, on: bool) {
        self.stalled.store(on, Ordering::Relaxed);
    }
}

/// Copies one direction; while stalled it passes nothing on (and reads nothing more), so the
/// sender's buffers fill and the connection hangs.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while stalled.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_pass_until_the_stall_and_again_after_it() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = upstream.accept().await.unwrap();
            let mut buf = [0u8; 4];
            while s.read_exact(&mut buf).await.is_ok() {
                s.write_all(&buf).await.unwrap(); // an echo
            }
        });
        let proxy = Proxy::start(port).await.unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let mut buf = [0u8; 4];
        c.write_all(b"ping").await.unwrap();
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        proxy.stall(true);
        c.write_all(b"pong").await.unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(500), c.read_exact(&mut buf)).await;
        assert!(waited.is_err(), "nothing comes back while stalled");
        proxy.stall(false);
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
    }
}
