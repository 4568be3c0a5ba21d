//! Test target: a Rust release binary (no frame pointers on x86-64 by default).
//!
//!   main -> rust_chain::run -> rust_chain::descend (x DEPTH) -> rust_chain::hot_loop
//!
//! argv[1]: readiness fd.
use std::fs::File;
use std::io::Write;
use std::os::unix::io::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

static SINK: AtomicU64 = AtomicU64::new(0);
const DEPTH: u32 = 12;

#[inline(never)]
fn hot_loop() {
    for i in 0..200_000u64 {
        SINK.fetch_add(i, Ordering::Relaxed);
    }
}

#[inline(never)]
fn descend(depth: u32) {
    let pad = [depth as u8; 256];
    if depth > 1 {
        descend(depth - 1);
    } else {
        hot_loop();
    }
    SINK.fetch_add(std::hint::black_box(pad)[7] as u64, Ordering::Relaxed);
}

#[inline(never)]
fn run(ready_fd: i32) {
    descend(DEPTH);
    if ready_fd >= 0 {
        let mut f = unsafe { File::from_raw_fd(ready_fd) };
        f.write_all(b"ready\n").unwrap();
    }
    loop {
        descend(DEPTH);
    }
}

fn main() {
    let fd = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(-1);
    run(fd);
}
