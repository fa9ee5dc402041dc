//! Warnings about a flood of similar events (refused connections, broken quota nodes), logged at
//! most once a second with the number suppressed since. Only logging depends on the clock,
//! never replicated state.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

pub struct RateLimitedWarn {
    last_ms: AtomicI64,
    suppressed: AtomicU64,
}

impl RateLimitedWarn {
    pub const fn new() -> Self {
        Self {
            last_ms: AtomicI64::new(i64::MIN),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Some(number suppressed since the last warning) when a warning may be logged now.
    pub fn check(&self) -> Option<u64> {
        let now = now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 1_000
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl Default for RateLimitedWarn {
    fn default() -> Self {
        Self::new()
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_warning_passes_and_repeats_are_counted() {
        let w = RateLimitedWarn::new();
        assert_eq!(w.check(), Some(0));
        assert_eq!(w.check(), None);
        assert_eq!(w.check(), None);
        // A second later the next one passes with the count of those suppressed.
        w.last_ms.store(now_ms() - 1_000, Ordering::Relaxed);
        assert_eq!(w.check(), Some(2));
    }
}
