//! The notifications of other nodes' stored events: one connection per store that `LISTEN`s, and hands each
//! notice to the session's open log, which reads what it has not published yet.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::log::{Shared, CHANNEL};
use super::Inner;

/// Follows the notifications of stored events for as long as the store lives, reconnecting when the database goes
/// away; after a reconnection every open log catches up, for the notifications missed meanwhile.
pub(crate) async fn listen(
    store: Weak<Inner>,
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
) {
    let mut reconnected = false;
    loop {
        if store.strong_count() == 0 {
            return;
        }
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let (tx, mut notes) = mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    use futures::StreamExt;
                    while let Some(Ok(message)) = messages.next().await {
                        if let tokio_postgres::AsyncMessage::Notification(n) = message {
                            let _ = tx.send(n.payload().to_string());
                        }
                    }
                });
                if client
                    .batch_execute(&format!("LISTEN {CHANNEL}"))
                    .await
                    .is_ok()
                {
                    if reconnected {
                        catch_up_all(&store).await;
                    }
                    while let Some(payload) = notes.recv().await {
                        let Some(inner) = store.upgrade() else { return };
                        let mut fields = payload.split(' ');
                        let (Some(id), Some(seq), Some(node)) =
                            (fields.next(), fields.next(), fields.next())
                        else {
                            continue;
                        };
                        // This node published its own batches as it stored them.
                        if node == inner.node.id {
                            continue;
                        }
                        let Ok(seq) = seq.parse::<u64>() else {
                            continue;
                        };
                        let log = inner
                            .logs
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get(id)
                            .and_then(Weak::upgrade);
                        if let Some(log) = log {
                            if seq > log.published.load(Ordering::Acquire) {
                                tokio::spawn(async move {
                                    let _ = log.follow(seq).await;
                                });
                            }
                        }
                    }
                }
                driver.abort();
            }
            Err(e) => tracing::warn!("cannot listen for other nodes' events: {e}"),
        }
        reconnected = true;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Brings every open log up to the database.
async fn catch_up_all(store: &Weak<Inner>) {
    let Some(inner) = store.upgrade() else { return };
    let logs: Vec<Arc<Shared>> = {
        let mut map = inner.logs.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, l| l.strong_count() > 0);
        map.values().filter_map(Weak::upgrade).collect()
    };
    drop(inner);
    for log in logs {
        let _ = log.catch_up().await;
    }
}
