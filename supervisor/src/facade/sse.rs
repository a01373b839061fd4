//! Server-sent events that a task produces while the response streams.

use std::convert::Infallible;

use axum::response::sse::Event;
use futures::{Stream, StreamExt};

/// A stream fed by a task through a small channel; the task's sends fail once the client goes, and it may stop.
pub fn async_stream<F, Fut>(run: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(run(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}
