//! The precise timer: a thread that wakes the core task at deadlines nearer than tokio's timer
//! resolution, so that a batch waits `batch_wait_us`, not a millisecond.
//!
//! Guarantees: at most one tick is pending, and arming again moves the deadline earlier, never
//! later; the thread ends when the timer is dropped or the core is gone. If the thread cannot
//! start, batches close on tokio's millisecond timer.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tracing::warn;

use super::CoreEvent;

/// A thread that wakes the core at sub-millisecond deadlines (a batch's `batch_wait_us` is
/// typically 200 µs; tokio's timer has a resolution of one millisecond). At most one tick is
/// pending: arming again moves the deadline earlier, never later.
#[derive(Debug)]
pub(super) struct PreciseTimer {
    state: Arc<(std::sync::Mutex<TimerState>, std::sync::Condvar)>,
}

#[derive(Debug, Default)]
struct TimerState {
    deadline: Option<Instant>,
    stop: bool,
}

impl PreciseTimer {
    pub(super) fn start(core: mpsc::Sender<CoreEvent>) -> PreciseTimer {
        let state = Arc::new((std::sync::Mutex::new(TimerState::default()), std::sync::Condvar::new()));
        let shared = state.clone();
        let spawned = std::thread::Builder::new().name("coordinator-timer".into()).spawn(move || {
            let (lock, cv) = &*shared;
            loop {
                let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if s.stop {
                        return;
                    }
                    match s.deadline {
                        None => s = cv.wait(s).unwrap_or_else(|e| e.into_inner()),
                        Some(t) => {
                            let now = Instant::now();
                            if now >= t {
                                s.deadline = None;
                                break;
                            }
                            s = cv.wait_timeout(s, t - now).unwrap_or_else(|e| e.into_inner()).0;
                        }
                    }
                }
                drop(s);
                if core.blocking_send(CoreEvent::Tick).is_err() {
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the precise timer; batches close on tokio's millisecond timer");
        }
        PreciseTimer { state }
    }

    /// Wakes the core at `at` (or earlier, if already armed earlier).
    pub(super) fn arm(&self, at: Instant) {
        let (lock, cv) = &*self.state;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        if s.deadline.is_none_or(|d| at < d) {
            s.deadline = Some(at);
            cv.notify_one();
        }
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        cv.notify_one();
    }
}
