//! The future of the shop's tower layers that finish an answer ([`Finish`]):
//! what they need of the request is taken when it comes in, the answer is
//! handed to it when the service below has one. No box and no clone of the
//! service below per request, as an axum `from_fn` or `map_response`
//! middleware makes (the timing of [`crate::metrics::TimedLayer`], the error
//! pages of [`crate::error::ErrorPagesLayer`], the request log, and the
//! answers that need nothing of the request: [`FinishLayer`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;

/// What a layer does to an answer, with what it took from the request.
pub trait Finish {
    /// The answer as it leaves the layer.
    fn finish(self, resp: Response) -> Response;
}

pin_project_lite::pin_project! {
    /// The answer of the service below, finished by `finish` once it is ready.
    pub struct Finishing<F, T> {
        #[pin]
        inner: F,
        finish: Option<T>,
    }
}

impl<F, T> Finishing<F, T> {
    /// `inner`'s answer, to be finished by `finish`.
    pub fn new(inner: F, finish: T) -> Self {
        Self {
            inner,
            finish: Some(finish),
        }
    }
}

impl<F, T> Future for Finishing<F, T>
where
    F: Future<Output = Result<Response, Infallible>>,
    T: Finish,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(resp) = std::task::ready!(this.inner.poll(cx));
        Poll::Ready(Ok(match this.finish.take() {
            Some(finish) => finish.finish(resp),
            // Polled again after it was ready: nothing left to do.
            None => resp,
        }))
    }
}

/// What a finishing layer takes from each request: the [`Finish`] its answer
/// gets. The layer's service is [`Finished`]: the timing
/// ([`crate::metrics::TimedLayer`]), the error pages
/// ([`crate::error::ErrorPagesLayer`]) and [`FinishLayer`].
pub trait Start {
    /// What finishes the answer.
    type Finish: Finish;
    /// Taken from `req` as it comes in (which it may change on its way down:
    /// its body watched, for one).
    fn start(&self, req: &mut Request) -> Self::Finish;
}

/// A layer finishing every answer with `T`, which needs nothing of the request
/// (the security headers of [`crate::http_limits::harden`], for one).
#[derive(Debug, Clone, Copy)]
pub struct FinishLayer<T>(pub T);

impl<T: Finish + Clone> Start for FinishLayer<T> {
    type Finish = T;

    fn start(&self, _req: &mut Request) -> T {
        self.0.clone()
    }
}

impl<S, T: Clone> tower::Layer<S> for FinishLayer<T> {
    type Service = Finished<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        Finished::new(inner, self.clone())
    }
}

/// The service of a finishing layer `T` ([`Start`]) over `S`.
#[derive(Debug, Clone)]
pub struct Finished<S, T> {
    inner: S,
    start: T,
}

impl<S, T> Finished<S, T> {
    /// `inner`, its answers finished as `start` says.
    pub fn new(inner: S, start: T) -> Self {
        Self { inner, start }
    }
}

impl<S, T> tower::Service<Request> for Finished<S, T>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
    T: Start,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Finishing<S::Future, T::Finish>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let finish = self.start.start(&mut req);
        Finishing::new(self.inner.call(req), finish)
    }
}
