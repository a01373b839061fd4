//! What the metrics cost a warm turn: `cargo bench -p service-supervisor --bench metrics`.
//!
//! A warm `run-sync` turn records one turn (its counter and duration histogram) and one request (its status counter
//! and the route's duration histogram), as `serve` does, on the runtime's own `Metrics`. The bench times that
//! recording, `BENCH_ITERS` turns a round (default 200,000) for `BENCH_ROUNDS` rounds (default 5), and prints each
//! round's cost per turn; the target is at most 0.05 ms. Two threads record at once in a second run, as two
//! clients' turns would on this machine's two cores.

#[path = "common/stats.rs"]
mod stats;
use stats::{env_or, median};

use service_supervisor::metrics::{Metrics, Status};

/// One warm turn's recording.
fn record(m: &Metrics) {
    m.turn_ended("completed", 0.0012);
    m.http_responses.get_or_create(&Status { code: 200 }).inc();
    m.http_request("POST", "/sessions/{id}/run-sync", 0.0015);
}

fn main() {
    let (iters, rounds) = (env_or("BENCH_ITERS", 200_000), env_or("BENCH_ROUNDS", 5));
    let metrics = std::sync::Arc::new(Metrics::default());
    println!("| threads | per turn, median of {rounds} rounds of {iters} turns |");
    println!("|---|---|");
    for threads in [1usize, 2] {
        let mut per_turn = Vec::new();
        for _ in 0..rounds {
            let started = std::time::Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let m = metrics.clone();
                    s.spawn(move || {
                        for _ in 0..iters {
                            record(&m);
                        }
                    });
                }
            });
            // Wall time per turn of one thread: what each client's turn waited.
            per_turn.push(started.elapsed() / iters as u32);
        }
        let per_turn = median(per_turn);
        println!("| {threads} | {:.3} µs |", per_turn.as_secs_f64() * 1e6);
    }
    // The encoded text still holds every series once, however many turns were recorded.
    assert!(metrics
        .encode()
        .contains("service_turn_duration_seconds_count{outcome=\"completed\"}"));
}
