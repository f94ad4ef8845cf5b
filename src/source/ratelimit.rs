//! client-go's client-side rate limit as a tower layer: a token bucket refilled at `qps`
//! tokens a second, holding at most `burst`; every request (a watch included) takes one
//! before it is sent. `qps <= 0` turns the limit off, as in client-go.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// The bucket's arithmetic, with time passed in.
#[derive(Debug, Clone)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket. `burst` below 1 still lets one request through at a time.
    pub fn new(qps: f32, burst: i32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Bucket { qps: f64::from(qps), burst, tokens: burst, last: now }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer {
    qps: f32,
    burst: i32,
}

impl RateLimitLayer {
    pub fn new(qps: f32, burst: i32) -> Self {
        RateLimitLayer { qps, burst }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        let bucket = (self.qps > 0.0).then(|| Bucket::new(self.qps, self.burst, Instant::now()));
        RateLimited { inner, bucket, wait: None, holding: false }
    }
}

/// The service a [`RateLimitLayer`] wraps: ready only once a token is held.
pub struct RateLimited<S> {
    inner: S,
    /// `None`: no limit.
    bucket: Option<Bucket>,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next `call`.
    holding: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &mut self.bucket {
            while !self.holding {
                if let Some(wait) = &mut self.wait {
                    ready!(wait.as_mut().poll(cx));
                    self.wait = None;
                }
                match bucket.take(Instant::now()) {
                    Ok(()) => self.holding = true,
                    Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.holding = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_request_per_token() {
        let t0 = Instant::now();
        let mut b = Bucket::new(5.0, 10, t0);
        for i in 0..10 {
            assert_eq!(b.take(t0), Ok(()), "request {i} of the burst");
        }
        let wait = b.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "one token every 1/qps: {wait:?}");
        assert_eq!(b.take(t0 + Duration::from_millis(200)), Ok(()));
        assert!(b.take(t0 + Duration::from_millis(250)).is_err());
        // A long idle refills only up to the burst.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..10 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }

    #[test]
    fn a_burst_below_one_still_lets_requests_through_one_at_a_time() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1.0, 0, t0);
        assert_eq!(b.take(t0), Ok(()));
        assert!(b.take(t0).is_err());
        assert_eq!(b.take(t0 + Duration::from_secs(1)), Ok(()));
    }
}
