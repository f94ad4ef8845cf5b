//! client-go's REST client metrics, which every Kubernetes component exposes and kube-proxy's
//! dashboard reads ("Kube API Request Rate", GET/POST latency): `rest_client_requests_total
//! {code,host,method}` and `rest_client_request_duration_seconds{verb,host}`, counted by a
//! tower layer under the kube client, so no caller counts by hand.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub code: String,
    pub host: String,
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: String,
    pub host: String,
}

/// client-go's latency buckets.
const BUCKETS: [f64; 12] = [0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0];

/// The two families, shared by the layer and the registry.
#[derive(Debug, Clone)]
pub struct ClientMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<VerbLabels, Histogram, fn() -> Histogram>,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        ClientMetrics { requests: Family::default(), duration: Family::new_with_constructor(|| Histogram::new(BUCKETS)) }
    }
}

impl ClientMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register("rest_client_requests", "Number of HTTP requests, partitioned by status code, method, and host.", self.requests.clone());
        r.register("rest_client_request_duration_seconds", "Request latency in seconds. Broken down by verb, and host.", self.duration.clone());
    }
}

/// Counts each request the client sends (`host`: the API server's `host:port`).
#[derive(Debug, Clone)]
pub struct MetricsLayer {
    metrics: Arc<ClientMetrics>,
    host: String,
}

impl MetricsLayer {
    pub fn new(metrics: Arc<ClientMetrics>, host: impl Into<String>) -> Self {
        MetricsLayer { metrics, host: host.into() }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted { inner, metrics: self.metrics.clone(), host: self.host.clone() }
    }
}

pub struct Counted<S> {
    inner: S,
    metrics: Arc<ClientMetrics>,
    host: String,
}

impl<S, B, R> Service<http::Request<B>> for Counted<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.method().as_str().to_string();
        let (metrics, host) = (self.metrics.clone(), self.host.clone());
        let start = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            // client-go's code label: the status, or "<error>" when no response came.
            let code = match &result {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics.duration.get_or_create(&VerbLabels { verb: method.clone(), host: host.clone() }).observe(start.elapsed().as_secs_f64());
            metrics.requests.get_or_create(&RequestLabels { code, host, method }).inc();
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_is_counted_by_code_method_and_host() {
        let metrics = Arc::new(ClientMetrics::default());
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            let status = if req.uri().path() == "/missing" { 404 } else { 200 };
            Ok::<_, std::convert::Infallible>(http::Response::builder().status(status).body(()).unwrap())
        });
        let mut counted = MetricsLayer::new(metrics.clone(), "198.18.0.1:6443").layer(svc);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for path in ["/api/v1/services", "/api/v1/services", "/missing"] {
            rt.block_on(counted.call(http::Request::get(path).body(()).unwrap())).unwrap();
        }
        let mut r = Registry::default();
        metrics.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(text.contains("rest_client_requests_total{code=\"200\",host=\"198.18.0.1:6443\",method=\"GET\"} 2"), "{text}");
        assert!(text.contains("rest_client_requests_total{code=\"404\",host=\"198.18.0.1:6443\",method=\"GET\"} 1"), "{text}");
        assert!(text.contains("rest_client_request_duration_seconds_count{verb=\"GET\",host=\"198.18.0.1:6443\"} 3"), "{text}");
    }
}
