//! A progress bar on stderr for large applies.
//!
//! The apply reports each finished resource through a callback that only bumps an atomic
//! counter; a separate thread redraws the bar ten times a second, so the workers never wait
//! on the terminal.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Below this many resources an apply is over before a bar would help.
const MIN_RESOURCES: usize = 200;
const WIDTH: usize = 40;

pub struct Bar {
    done: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    painter: Option<JoinHandle<()>>,
}

impl Bar {
    /// A bar when stderr is a terminal and the apply is large enough to want one.
    pub fn for_stderr(total: usize) -> Option<Bar> {
        if total < MIN_RESOURCES || !std::io::stderr().is_terminal() {
            return None;
        }
        let done = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let painter = {
            let (done, stop) = (done.clone(), stop.clone());
            std::thread::Builder::new()
                .name("weft-progress".into())
                .spawn(move || {
                    let started = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        paint(done.load(Ordering::Relaxed), total, started);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    paint(done.load(Ordering::Relaxed), total, started);
                    eprintln!();
                })
                .ok()
        };
        Some(Bar { done, stop, painter })
    }

    /// The callback the apply calls as resources finish.
    pub fn callback(&self) -> Arc<dyn Fn(usize, usize) + Send + Sync> {
        let done = self.done.clone();
        Arc::new(move |finished, _total| {
            done.fetch_max(finished, Ordering::Relaxed);
        })
    }

    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(painter) = self.painter.take() {
            let _ = painter.join();
        }
    }
}

fn paint(done: usize, total: usize, started: Instant) {
    let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH).min(WIDTH);
    let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-3);
    let mut err = std::io::stderr().lock();
    let _ =
        write!(err, "\r[{}{}] {done}/{total} resources, {rate:.0}/s", "#".repeat(filled), "-".repeat(WIDTH - filled));
    let _ = err.flush();
}
