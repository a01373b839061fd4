//! The threads that serve HTTP connections. Each is a thread with a single-threaded Tokio runtime of its own; an
//! accepted connection is handed to the one serving the fewest, and its requests, and the tasks they spawn, run
//! there.
//!
//! Why not the shared work-stealing runtime: when one of its parked threads wakes with work (a client's request, the
//! provider's reply) while no other thread looks for work, Tokio wakes a second thread to look, so that nothing
//! queued behind waits; a warm turn crosses threads several times, and on a machine whose idle processors are slow
//! to wake each crossing costs tens of microseconds (`docs/src/benchmarks.md`, "Over HTTP"). On a thread of its
//! own a turn wakes one thread per message. What is given up is work stealing: a request's synchronous work (a
//! sandbox's clone waits for its `execve`) holds up the connections on its thread. There are twice as many threads
//! as processors, so that the kernel runs the others meanwhile.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;

/// The threads to serve connections on by default: twice the processors, at most 64.
pub fn default_count() -> usize {
    let processors = std::thread::available_parallelism().map_or(1, usize::from);
    (2 * processors).min(64)
}

/// Threads that serve connections, each with a single-threaded runtime.
pub struct Lanes {
    lanes: Vec<Lane>,
}

struct Lane {
    runtime: tokio::runtime::Handle,
    /// The connections it serves now.
    open: Arc<AtomicUsize>,
    /// Dropped to stop the thread.
    stop: Option<oneshot::Sender<()>>,
    /// Resolves once the thread's runtime is gone, its blocking tasks done.
    stopped: Option<oneshot::Receiver<()>>,
}

/// Counts a connection as open on its lane while it lives.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Lanes {
    /// Starts `count` threads (at least one).
    pub fn start(count: usize) -> std::io::Result<Lanes> {
        let mut lanes = Vec::with_capacity(count.max(1));
        for n in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = runtime.handle().clone();
            let (stop, stop_rx) = oneshot::channel::<()>();
            let (stopped_tx, stopped) = oneshot::channel();
            std::thread::Builder::new()
                .name(format!("http-{n}"))
                .spawn(move || {
                    // Ends when `stop` is sent or dropped.
                    let _ = runtime.block_on(stop_rx);
                    // As the shared runtime's end does, this waits for the blocking tasks the connections started:
                    // a turn's flushes are among them.
                    drop(runtime);
                    let _ = stopped_tx.send(());
                })?;
            lanes.push(Lane {
                runtime: handle,
                open: Arc::default(),
                stop: Some(stop),
                stopped: Some(stopped),
            });
        }
        Ok(Lanes { lanes })
    }

    /// Serves `connection` on the thread with the fewest open connections (the first of them on a tie, so that
    /// one client's connections in a row stay on one thread).
    pub fn serve<F>(&self, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Some(lane) = self
            .lanes
            .iter()
            .min_by_key(|l| l.open.load(Ordering::Relaxed))
        else {
            return drop(tokio::spawn(connection));
        };
        lane.open.fetch_add(1, Ordering::Relaxed);
        let open = Open(lane.open.clone());
        lane.runtime.spawn(async move {
            connection.await;
            drop(open);
        });
    }

    /// Stops every thread, and waits until their runtimes are gone; call once the connections have ended.
    pub async fn stop(mut self) {
        for lane in &mut self.lanes {
            lane.stop.take();
        }
        for lane in &mut self.lanes {
            if let Some(stopped) = lane.stopped.take() {
                let _ = stopped.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_connections_tasks_run_on_its_thread_and_the_next_goes_to_the_idler_one() {
        let lanes = Lanes::start(2).expect("lanes");
        let (tx, rx) = std::sync::mpsc::channel();
        let (hold, held) = oneshot::channel::<()>();
        let first = tx.clone();
        lanes.serve(async move {
            let own = std::thread::current().id();
            let spawned = tokio::spawn(async { std::thread::current().id() })
                .await
                .expect("task");
            first.send((own, spawned)).expect("send");
            let _ = held.await;
        });
        let (a, a_spawned) = rx.recv_timeout(Duration::from_secs(5)).expect("first");
        assert_eq!(
            a, a_spawned,
            "a task a connection spawns runs on its thread"
        );
        lanes.serve(async move {
            tx.send((std::thread::current().id(), std::thread::current().id()))
                .expect("send");
        });
        let (b, _) = rx.recv_timeout(Duration::from_secs(5)).expect("second");
        assert_ne!(
            a, b,
            "the second connection goes to the thread that serves none"
        );
        assert_ne!(a, std::thread::current().id());
        drop(hold);
        lanes.stop().await;
    }

    #[tokio::test]
    async fn stopping_waits_for_the_blocking_tasks_a_connection_started() {
        let lanes = Lanes::start(1).expect("lanes");
        let done = Arc::new(AtomicUsize::new(0));
        let (started, is_started) = oneshot::channel();
        let flushed = done.clone();
        lanes.serve(async move {
            drop(tokio::task::spawn_blocking(move || {
                std::thread::sleep(Duration::from_millis(200));
                flushed.store(1, Ordering::SeqCst);
            }));
            let _ = started.send(());
        });
        is_started.await.expect("started");
        lanes.stop().await;
        assert_eq!(
            done.load(Ordering::SeqCst),
            1,
            "the blocking task ended first"
        );
    }
}
