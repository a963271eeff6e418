//! What a connection and a review body may cost, so that stalled or slow clients cannot take
//! the webhook past its memory limit or keep it from answering the API server: a cap on open
//! connections, an idle timeout, a deadline for each body, and a shared budget for the bytes of
//! large bodies. A closing connection first reads what the client is still sending (briefly),
//! so a refusal (413, 431) reaches it instead of a connection reset.

use std::future::{Ready, ready};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready as ready_poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum_server::accept::Accept;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};
use tokio::time::{Instant, Sleep};

/// What the webhook allows each connection and review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest review body, in bytes (an object and its old version).
    pub max_body: usize,
    /// Open connections at most; more are closed as they arrive.
    pub max_connections: usize,
    /// Time for a request's headers to arrive.
    pub header_timeout: Duration,
    /// Time for a request's body to arrive, from its headers.
    pub body_timeout: Duration,
    /// A connection that sends and takes nothing for this long is closed.
    pub idle_timeout: Duration,
    /// Bytes of bodies above [`SMALL_BODY`] held at once, across all requests.
    pub large_body_budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 8 << 20,
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            large_body_budget: 32 << 20,
        }
    }
}

/// A body up to this size never waits for the shared budget: every review of an ordinary
/// object. With the connection cap, it bounds what small bodies hold.
pub const SMALL_BODY: usize = 64 << 10;
/// A request's headers at most (431 past it): the API server sends a few hundred bytes.
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// What a closing connection reads and drops at most, and for how long.
const LINGER_BYTES: usize = 16 << 20;
const LINGER: Duration = Duration::from_secs(2);
/// The read buffer before TLS: rustls reads in 4 KiB steps, so a review of 4-16 KiB (what the
/// API server sends) took two or three `recv` calls; buffered, it takes one.
const READ_BUFFER: usize = 16 * 1024;

/// Accepts a TCP connection while under the cap; TCP_NODELAY, since a review answer is one
/// small write that Nagle would hold for the client's delayed ACK (40 ms).
#[derive(Clone)]
pub struct GuardedAcceptor {
    connections: Arc<Semaphore>,
    idle_timeout: Duration,
}

impl GuardedAcceptor {
    pub fn new(limits: &Limits) -> Self {
        GuardedAcceptor {
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            idle_timeout: limits.idle_timeout,
        }
    }
}

impl<S> Accept<TcpStream, S> for GuardedAcceptor {
    type Stream = Guarded;
    type Service = S;
    type Future = Ready<io::Result<(Guarded, S)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            return ready(Err(io::Error::other(
                "connection refused: the webhook holds --max-connections already",
            )));
        };
        ready(stream.set_nodelay(true).map(|()| {
            let guarded = Guarded {
                inner: BufReader::with_capacity(READ_BUFFER, stream),
                _permit: permit,
                idle_timeout: self.idle_timeout,
                idle: Box::pin(tokio::time::sleep(self.idle_timeout)),
                active_at: Instant::now(),
                linger: None,
            };
            (guarded, service)
        }))
    }
}

/// A connection under the idle timeout, holding its place under the cap until dropped.
pub struct Guarded {
    inner: BufReader<TcpStream>,
    _permit: OwnedSemaphorePermit,
    idle_timeout: Duration,
    /// Fires at the idle deadline as last set; moved on lazily, when it fires.
    idle: Pin<Box<Sleep>>,
    /// When a read or write last moved.
    active_at: Instant,
    /// While closing: until when, and how much was dropped.
    linger: Option<(Pin<Box<Sleep>>, usize)>,
}

impl Guarded {
    /// A read or write that moved restarts the idle clock; one that waits is cut off once
    /// the connection has been idle past the timeout. The timer is moved only when it fires
    /// early, not on every read and write.
    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.active_at = Instant::now();
            return polled;
        }
        while self.idle.as_mut().poll(cx).is_ready() {
            let deadline = self.active_at + self.idle_timeout;
            if Instant::now() >= deadline {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection was idle past --idle-timeout",
                )));
            }
            self.idle.as_mut().reset(deadline);
        }
        Poll::Pending
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.progress(cx, polled)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, data);
        this.progress(cx, polled)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    /// Sends FIN, then reads and drops what the client still sends (for [`LINGER`], at most
    /// [`LINGER_BYTES`]): closing with unread data would reset the connection and lose the
    /// answer just written.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.linger.is_none() {
            ready_poll!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            this.linger = Some((Box::pin(tokio::time::sleep(LINGER)), 0));
        }
        let Some((until, dropped)) = this.linger.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let mut scratch = [0u8; 8192];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    *dropped += buf.filled().len();
                    if *dropped > LINGER_BYTES {
                        return Poll::Ready(Ok(()));
                    }
                }
                // The client closed too, or the connection broke: done either way.
                Poll::Ready(_) => return Poll::Ready(Ok(())),
                Poll::Pending => {
                    return match until.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Ok(())),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
    }
}

/// The shared budget for the bytes of large bodies.
pub struct BodyBudget {
    large: Semaphore,
}

impl BodyBudget {
    pub fn new(limits: &Limits) -> Self {
        BodyBudget {
            large: Semaphore::new(limits.large_body_budget.min(Semaphore::MAX_PERMITS)),
        }
    }
}

/// Why a body was not read, as the status and message to answer with.
pub type Refusal = (StatusCode, String);

/// Reads a review body within the limits: too large is 413 (before reading, when the client
/// declares its length), too slow 408, and past the shared budget for large bodies 503.
pub async fn read_body(
    body: Body,
    declared: Option<u64>,
    limits: &Limits,
    budget: &BodyBudget,
) -> Result<Bytes, Refusal> {
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the review body is larger than --max-body-bytes ({} bytes)",
                limits.max_body
            ),
        )
    };
    if declared.is_some_and(|n| n > limits.max_body as u64) {
        return Err(too_large());
    }
    let deadline = Instant::now() + limits.body_timeout;
    let mut body = body;
    let mut held = Held {
        budget: &budget.large,
        permit: None,
    };
    // A declared length is reserved whole at once: a large body the budget cannot hold is
    // refused before any of it is read, and its buffer never grows by doubling.
    let mut out = Vec::new();
    grow(&mut out, declared.map_or(0, |n| n as usize), &mut held)?;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the review body did not arrive within --body-timeout ({:?})",
                        limits.body_timeout
                    ),
                ));
            }
            Ok(None) => return Ok(Bytes::from(out)),
            Ok(Some(Err(e))) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("reading the review body: {e}"),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let total = out.len() + data.len();
        if total > limits.max_body {
            return Err(too_large());
        }
        if total > out.capacity() {
            let doubled = total.max(out.capacity() * 2).min(limits.max_body);
            grow(&mut out, doubled, &mut held)?;
        }
        out.extend_from_slice(&data);
    }
}

/// The budget a request holds for its buffer's bytes above [`SMALL_BODY`].
struct Held<'b> {
    budget: &'b Semaphore,
    permit: Option<SemaphorePermit<'b>>,
}

/// Grows the buffer to `capacity`, first taking what it adds above [`SMALL_BODY`] from the
/// shared budget: never waited for, so a full budget is a 503 at once.
fn grow(out: &mut Vec<u8>, capacity: usize, held: &mut Held<'_>) -> Result<(), Refusal> {
    let above = |c: usize| c.saturating_sub(SMALL_BODY);
    let more = above(capacity).saturating_sub(above(out.capacity()));
    if more > 0 {
        let permit = u32::try_from(more)
            .ok()
            .and_then(|n| held.budget.try_acquire_many(n).ok())
            .ok_or_else(|| {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the webhook holds as many large review bodies as --large-body-budget-bytes allows; retry"
                        .to_string(),
                )
            })?;
        match held.permit.as_mut() {
            Some(p) => p.merge(permit),
            None => held.permit = Some(permit),
        }
    }
    out.reserve_exact(capacity.saturating_sub(out.len()));
    Ok(())
}
