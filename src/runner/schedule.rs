//! When to sync: kube-proxy's bounded-frequency runner as a pure state machine. Time is
//! passed in, so tests drive it without a clock.
//!
//! - Nothing runs before the sources have listed everything once (an empty or half state
//!   must never be applied).
//! - A change schedules a sync no earlier than `min_sync_period` after the last one;
//!   changes arriving before it runs are coalesced into it.
//! - Every `sync_period` a full sync runs, changes or not.
//! - A failed sync is retried with exponential backoff (1 s, 2 s, 4 s … up to
//!   `sync_period`), and the retry is a full sync.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub min_sync_period: Duration,
    pub sync_period: Duration,
    pub retry_base: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { min_sync_period: Duration::from_secs(1), sync_period: Duration::from_secs(30), retry_base: Duration::from_secs(1) }
    }
}

/// What the next sync must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only what changed.
    Partial,
    /// Everything, compared with the kernel (periodic, first, or after a failure).
    Full,
}

#[derive(Debug, Clone)]
pub struct Schedule {
    timing: Timing,
    ready: bool,
    last_sync: Option<Instant>,
    last_full: Option<Instant>,
    /// The oldest change not yet synced.
    pending_since: Option<Instant>,
    failures: u32,
    retry_at: Option<Instant>,
    /// The oldest change the running sync covers (taken from `pending_since` at begin).
    in_flight: Option<Instant>,
}

impl Schedule {
    pub fn new(timing: Timing) -> Self {
        Schedule {
            timing,
            ready: false,
            last_sync: None,
            last_full: None,
            pending_since: None,
            failures: 0,
            retry_at: None,
            in_flight: None,
        }
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The sources have listed everything once: syncing may start.
    pub fn set_ready(&mut self, now: Instant) {
        if !self.ready {
            self.ready = true;
            self.pending_since.get_or_insert(now);
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// A change arrived.
    pub fn changed(&mut self, now: Instant) {
        self.pending_since.get_or_insert(now);
    }

    /// The oldest change still waiting, if any.
    pub fn pending_since(&self) -> Option<Instant> {
        self.pending_since
    }

    pub fn last_sync(&self) -> Option<Instant> {
        self.last_sync
    }

    /// When the next sync should run; `None` before the sources are ready.
    pub fn next(&self) -> Option<Instant> {
        if !self.ready {
            return None;
        }
        if let Some(retry) = self.retry_at {
            return Some(retry);
        }
        let periodic = match self.last_full {
            Some(t) => t + self.timing.sync_period,
            None => return Some(self.pending_since.unwrap_or_else(Instant::now)),
        };
        let for_change = self.pending_since.map(|since| match self.last_sync {
            Some(last) => since.max(last + self.timing.min_sync_period),
            None => since,
        });
        Some(for_change.map_or(periodic, |c| c.min(periodic)))
    }

    /// What kind of sync a run at `now` should be.
    pub fn kind(&self, now: Instant) -> Kind {
        let full_due = self.last_full.is_none_or(|t| now >= t + self.timing.sync_period);
        if full_due || self.failures > 0 { Kind::Full } else { Kind::Partial }
    }

    /// A sync starts now: it covers every change so far; later ones stay pending.
    pub fn begin(&mut self, now: Instant) -> Kind {
        self.in_flight = self.pending_since.take().or(Some(now));
        self.kind(now)
    }

    /// The sync begun at `started` finished.
    pub fn done(&mut self, started: Instant, finished: Instant, kind: Kind, ok: bool) {
        self.last_sync = Some(started);
        let covered = self.in_flight.take();
        if ok {
            self.failures = 0;
            self.retry_at = None;
            if kind == Kind::Full {
                self.last_full = Some(started);
            }
        } else {
            // What it covered is still to do.
            self.pending_since = match (covered, self.pending_since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.failures += 1;
            let backoff = self.timing.retry_base * 2u32.saturating_pow(self.failures.min(16) - 1);
            self.retry_at = Some(finished + backoff.min(self.timing.sync_period));
        }
    }

    /// kube-proxy's health: unhealthy once a queued change has waited longer than twice
    /// the sync period without a successful sync.
    pub fn healthy(&self, now: Instant) -> bool {
        match self.pending_since {
            Some(since) => now.duration_since(since) <= self.timing.sync_period * 2,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn nothing_runs_before_the_sources_are_ready_then_a_full_sync() {
        let base = Instant::now();
        let mut s = Schedule::new(Timing::default());
        s.changed(base);
        assert_eq!(s.next(), None);
        s.set_ready(t(base, 10));
        assert_eq!(s.next(), Some(base));
        assert_eq!(s.kind(t(base, 10)), Kind::Full);
    }

    #[test]
    fn a_burst_is_coalesced_and_rate_limited_by_min_sync_period() {
        let base = Instant::now();
        let mut s = Schedule::new(Timing::default());
        s.set_ready(base);
        s.begin(base);
        s.done(base, t(base, 50), Kind::Full, true);
        for i in 0..1000 {
            s.changed(t(base, 100 + i));
        }
        assert_eq!(s.next(), Some(t(base, 1000)), "not before min-sync-period after the last sync");
        assert_eq!(s.begin(t(base, 1000)), Kind::Partial);
        s.done(t(base, 1000), t(base, 1010), Kind::Partial, true);
        assert_eq!(s.pending_since(), None, "the whole burst went into one sync");
        assert_eq!(s.next(), Some(t(base, 30_000)), "then the periodic full sync");
        assert_eq!(s.kind(t(base, 30_000)), Kind::Full);
    }

    #[test]
    fn a_change_during_a_sync_stays_pending() {
        let base = Instant::now();
        let mut s = Schedule::new(Timing::default());
        s.set_ready(base);
        s.begin(base);
        s.changed(t(base, 5));
        s.done(t(base, 0), t(base, 20), Kind::Full, true);
        assert_eq!(s.pending_since(), Some(t(base, 5)));
    }

    #[test]
    fn failures_retry_with_backoff_as_full_syncs_and_health_degrades() {
        let base = Instant::now();
        let timing = Timing { sync_period: Duration::from_secs(10), ..Timing::default() };
        let mut s = Schedule::new(timing);
        s.set_ready(base);
        s.begin(base);
        s.done(base, t(base, 100), Kind::Full, false);
        assert_eq!(s.next(), Some(t(base, 1100)));
        assert_eq!(s.kind(t(base, 1100)), Kind::Full);
        s.begin(t(base, 1100));
        s.done(t(base, 1100), t(base, 1200), Kind::Full, false);
        assert_eq!(s.next(), Some(t(base, 3200)));
        for i in 0..10 {
            s.begin(t(base, 4000 + i));
            s.done(t(base, 4000 + i), t(base, 4000 + i), Kind::Full, false);
        }
        assert_eq!(s.next(), Some(t(base, 4009 + 10_000)), "backoff is capped at the sync period");
        assert!(s.healthy(t(base, 20_000)));
        assert!(!s.healthy(t(base, 20_001)), "a change queued for over twice the sync period");
        s.begin(t(base, 21_000));
        s.done(t(base, 21_000), t(base, 21_100), Kind::Full, true);
        assert!(s.healthy(t(base, 21_200)));
    }
}
