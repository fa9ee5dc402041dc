//! Reading a client connection at most `max_read_bytes_per_second`: a token bucket holding one
//! second's worth. A faster client is read more slowly (its requests wait in its own socket
//! buffer and then in TCP), as ZooKeeper throttles a connection by not reading it; it is never
//! closed for it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Smallest bucket, whatever the rate (one typical request fits).
const MIN_BURST: f64 = 64.0 * 1024.0;

pub(super) struct Throttled<R> {
    inner: R,
    /// Bytes per second; 0 for no limit.
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Called each time a read has to wait.
    on_throttle: Box<dyn FnMut() + Send>,
}

impl<R> Throttled<R> {
    /// `largest`: the largest request a client may send (`max_buffer` and its length prefix):
    /// the bucket holds at least that much, so a request of any allowed size is read whole
    /// without waiting out a refill (configurations make the rate large enough that a refill
    /// never outlasts the session timeout, see `Config::validate`).
    pub(super) fn new(
        inner: R,
        rate: u64,
        largest: usize,
        on_throttle: Box<dyn FnMut() + Send>,
    ) -> Self {
        let rate = rate as f64;
        let burst = rate.max(MIN_BURST).max(largest as f64);
        Throttled {
            inner,
            rate,
            burst,
            tokens: burst,
            last: Instant::now(),
            sleep: None,
            on_throttle,
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Throttled<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.rate <= 0.0 {
            return Pin::new(&mut me.inner).poll_read(cx, buf);
        }
        if let Some(s) = me.sleep.as_mut() {
            if s.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            me.sleep = None;
        }
        me.refill();
        if me.tokens < 1.0 {
            // Wait for a useful amount (up to 8 KiB, or what a smaller rate gives in 50 ms).
            let want = (8192.0f64).min(me.rate / 20.0).max(1.0);
            let wait = Duration::from_secs_f64((want - me.tokens) / me.rate);
            (me.on_throttle)();
            let mut s = Box::pin(tokio::time::sleep(wait));
            if s.as_mut().poll(cx).is_ready() {
                me.refill();
            } else {
                me.sleep = Some(s);
                return Poll::Pending;
            }
        }
        let allow = (me.tokens as usize).clamp(1, buf.remaining().max(1));
        // Read into at most `allow` bytes of the buffer (initialized once, then reused).
        let mut part = ReadBuf::new(buf.initialize_unfilled_to(allow.min(buf.remaining())));
        let r = Pin::new(&mut me.inner).poll_read(cx, &mut part);
        let n = part.filled().len();
        buf.advance(n);
        me.tokens -= n as f64;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn reads_at_most_the_rate() {
        let data = vec![7u8; 250_000];
        let throttled = Arc::new(AtomicUsize::new(0));
        let t = throttled.clone();
        let mut r = Throttled::new(
            &data[..],
            100_000,
            0,
            Box::new(move || {
                t.fetch_add(1, Ordering::Relaxed);
            }),
        );
        let start = Instant::now();
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, data);
        // 100 kB of burst, then 150 kB at 100 kB/s.
        let took = start.elapsed().as_secs_f64();
        assert!((1.45..2.5).contains(&took), "{took}");
        assert!(throttled.load(Ordering::Relaxed) > 0);
    }

    #[tokio::test]
    async fn no_limit_when_zero() {
        let data = vec![1u8; 1 << 20];
        let mut r = Throttled::new(&data[..], 0, 0, Box::new(|| panic!("throttled")));
        let start = Instant::now();
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out.len(), data.len());
        assert!(start.elapsed() < Duration::from_millis(500));
    }
}
