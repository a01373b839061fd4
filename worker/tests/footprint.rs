//! `footprint::give_back` on the main thread (this test has no harness, so it runs there): the stack pages a deep
//! call touched are given back, and the frames above the caller are untouched.

#![allow(clippy::expect_used)]

/// Touches `kib` KiB of stack below the caller, then returns a value computed from it.
#[inline(never)]
fn deep(kib: usize) -> u64 {
    let mut block = [0u8; 1024];
    for (i, b) in block.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let here = std::hint::black_box(&block)
        .iter()
        .map(|b| *b as u64)
        .sum::<u64>();
    if kib == 0 {
        here
    } else {
        here + deep(kib - 1)
    }
}

/// Private dirty KiB of this process's main stack.
fn stack_kib() -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut in_stack = false;
    for line in smaps.lines() {
        if line.contains("[stack]") {
            in_stack = true;
        } else if in_stack && line.starts_with("Private_Dirty:") {
            return line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    panic!("no [stack] in /proc/self/smaps");
}

fn main() {
    let canary = std::hint::black_box([7u64; 64]);
    let expected = deep(400);
    let touched = stack_kib();
    assert!(
        touched >= 400,
        "the deep call touched {touched} KiB of stack"
    );
    service_worker::footprint::give_back();
    let kept = stack_kib();
    assert!(
        kept < touched - 300,
        "stack still {kept} KiB after give_back (was {touched})"
    );
    assert_eq!(canary, [7u64; 64], "a frame above the caller changed");
    assert_eq!(deep(400), expected, "the given-back stack works as new");
    println!("stack: {touched} KiB touched, {kept} KiB after give_back");
}
