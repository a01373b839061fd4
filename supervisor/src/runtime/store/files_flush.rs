//! The files store's group flush, for [`super::TurnFlush::Background`]: files written by turns' ends wait here, and
//! one thread flushes what gathered every [`ROUND`]. Back-to-back turns of one session then share a flush instead
//! of paying one each: on a virtual machine a flush costs CPU as well as waiting (the device is kicked through a
//! trap, and its completion interrupts whatever runs), and the next turn paid for it.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// How long a written file may wait for its flush.
const ROUND: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Pending {
    files: Mutex<Vec<File>>,
    added: Condvar,
}

/// The files waiting for the flushing thread; None when it could not be started.
static PENDING: OnceLock<Option<&'static Pending>> = OnceLock::new();

/// Hands `files` to the flushing thread, started on first use; they are on disk within about [`ROUND`]. Without
/// that thread they are flushed here and now.
pub(super) fn flush_soon(files: Vec<File>) {
    if files.is_empty() {
        return;
    }
    let pending = PENDING.get_or_init(|| {
        let pending: &'static Pending = Box::leak(Box::default());
        let started = std::thread::Builder::new()
            .name("turn-flush".into())
            .spawn(move || flush_rounds(pending));
        match started {
            Ok(_) => Some(pending),
            Err(e) => {
                tracing::warn!(
                    "no thread to flush turns in the background ({e}); each is flushed as it ends"
                );
                None
            }
        }
    });
    match pending {
        Some(pending) => {
            let mut waiting = pending.files.lock().unwrap_or_else(|p| p.into_inner());
            // The thread waits only for an empty list to fill: a notice to one it already holds would be a system
            // call for nothing, on every turn.
            let was_empty = waiting.is_empty();
            waiting.extend(files);
            if was_empty {
                pending.added.notify_one();
            }
        }
        None => {
            flush_each_file_once(files);
        }
    }
}

fn flush_rounds(pending: &'static Pending) {
    loop {
        {
            let waiting = pending.files.lock().unwrap_or_else(|p| p.into_inner());
            let _waiting = pending
                .added
                .wait_while(waiting, |w| w.is_empty())
                .unwrap_or_else(|p| p.into_inner());
        }
        // Let the round gather what the next turns write.
        std::thread::sleep(ROUND);
        let files = std::mem::take(&mut *pending.files.lock().unwrap_or_else(|p| p.into_inner()));
        flush_each_file_once(files);
    }
}

/// Flushes the data of each file in `files` once, however many of them are open on it (a flush of a file with
/// nothing to write still makes the device flush its cache); how many flushes it made.
fn flush_each_file_once(files: Vec<File>) -> usize {
    let mut seen = HashSet::new();
    let mut flushed = 0;
    for file in files {
        let id = file.metadata().map(|m| (m.dev(), m.ino()));
        if id.as_ref().is_ok_and(|id| !seen.insert(*id)) {
            continue;
        }
        flushed += 1;
        if let Err(e) = file.sync_data() {
            tracing::error!("a turn's end written to the store could not be flushed to disk: {e}");
        }
    }
    flushed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_flushes_each_file_once_however_often_it_was_handed_over() {
        let dir = tempfile::TempDir::new().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let open = |p: &std::path::Path| File::open(p).unwrap();
        let files = vec![open(&a), open(&b), open(&a), open(&a)];
        assert_eq!(flush_each_file_once(files), 2);
    }

    /// The flushing thread is one per process: its tests take turns.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// Waits until the flushing thread has taken every file handed to it: it owns them until it has flushed them,
    /// so an empty list means the round is done.
    fn taken(what: &str) {
        let pending = PENDING.get().unwrap().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !pending.files.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "{what} never taken");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_thread_waiting_on_an_empty_list_wakes_for_the_next_files_and_takes_later_ones_with_them() {
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("g");
        std::fs::write(&path, b"g").unwrap();
        let open = || File::open(&path).unwrap();
        flush_soon(vec![open()]);
        taken("the first file");
        // Rounds later the thread waits on the empty list, for a notice.
        std::thread::sleep(ROUND * 5);
        flush_soon(vec![open()]);
        // This one finds the list filled, so it sends no notice of its own.
        flush_soon(vec![open()]);
        taken("the files handed over to a waiting thread");
    }

    #[test]
    fn files_handed_over_are_flushed_within_a_round_and_the_thread_serves_later_rounds() {
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::TempDir::new().unwrap();
        for round in 0..2 {
            let path = dir.path().join(format!("f{round}"));
            std::fs::write(&path, b"x").unwrap();
            let (a, b) = (File::open(&path).unwrap(), File::open(&path).unwrap());
            flush_soon(vec![a, b]);
            taken(&format!("round {round}"));
        }
    }
}
