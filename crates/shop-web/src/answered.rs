//! The future of the shop's tower layers that finish an answer ([`Finish`]):
//! what they need of the request is taken when it comes in, the answer is
//! handed to it when the service below has one. No box and no clone of the
//! service below per request, as an axum `from_fn` middleware makes
//! (the timing of [`crate::metrics::TimedLayer`], the error pages of
//! [`crate::error::ErrorPagesLayer`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

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
