//! When to sync: kube-proxy's bounded-frequency runner as a pure state machine, below the
//! runner (which drives it) and the health endpoints (which read whether it is healthy).
//! Every instant is passed in and the clock is never read here, so tests drive it
//! without one.
//!
//! - Nothing runs before the sources have listed everything once (an empty or half state
//!   must never be applied).
//! - A change schedules a sync no earlier than `min_sync_period` after the last one;
//!   changes arriving before it runs are coalesced into it.
//! - Every `sync_period` a sync runs, changes or not; it is **partial** (only what changed
//!   is sent, the kernel is not read). It counts from the last periodic sync (or full sync),
//!   which [`Schedule::begin`] records, so changes in between do not put it off and a mode
//!   without canaries needs nothing more. Before it, a mode with canaries checks them
//!   ([`Schedule::canary_due`]); a lost canary asks for a full sync ([`Schedule::force_full`]).
//! - A **full** sync (everything compared with the kernel) runs first, after any failure,
//!   when asked for ([`Schedule::force_full`]: a lost canary, or new node labels, which
//!   re-render every service; the proxier compares with the kernel after a re-render in
//!   any case), and once `full_sync_period` (1 hour, kube-proxy's `FullSyncPeriod`) has
//!   passed since the last one.
//! - A failed sync is retried with exponential backoff (1 s, 2 s, 4 s … up to
//!   `sync_period`), and the retry is a full sync.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub min_sync_period: Duration,
    pub sync_period: Duration,
    pub retry_base: Duration,
    /// The longest time between full syncs (kube-proxy's `FullSyncPeriod`, 1 hour).
    pub full_sync_period: Duration,
}

/// kube-proxy's `FullSyncPeriod` (pkg/proxy/util): a constant there.
pub const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

impl Default for Timing {
    fn default() -> Self {
        Timing {
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            retry_base: Duration::from_secs(1),
            full_sync_period: FULL_SYNC_PERIOD,
        }
    }
}

/// What the next sync must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only what changed.
    Partial,
    /// Everything, compared with the kernel (the first, after a failure, when forced, or
    /// once `full_sync_period` has passed).
    Full,
}

#[derive(Debug, Clone, Default)]
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
    /// A full sync was asked for (a canary was lost) and has not succeeded yet.
    forced: bool,
    /// When the last periodic sync began (or the canaries were checked before it).
    last_periodic: Option<Instant>,
}

impl Schedule {
    pub fn new(timing: Timing) -> Self {
        Schedule { timing, ..Schedule::default() }
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

    /// When the next sync should run (an instant already past means now); `None` before
    /// the sources are ready. Until the first sync has finished it is due from when the
    /// sources became ready (the change [`Schedule::set_ready`] records).
    pub fn next(&self) -> Option<Instant> {
        if !self.ready {
            return None;
        }
        if let Some(retry) = self.retry_at {
            return Some(retry);
        }
        let (Some(last_sync), Some(last_full)) = (self.last_sync, self.last_full) else {
            return self.pending_since.or(self.in_flight);
        };
        let periodic = (last_sync + self.timing.sync_period)
            .min(self.periodic_base(last_full) + self.timing.sync_period)
            .min(last_full + self.timing.full_sync_period);
        let for_change = self.pending_since.map(|since| match self.last_sync {
            Some(last) => since.max(last + self.timing.min_sync_period),
            None => since,
        });
        Some(for_change.map_or(periodic, |c| c.min(periodic)))
    }

    /// What kind of sync a run at `now` should be.
    pub fn kind(&self, now: Instant) -> Kind {
        let full_due = self.last_full.is_none_or(|t| now >= t + self.timing.full_sync_period);
        if full_due || self.forced || self.failures > 0 { Kind::Full } else { Kind::Partial }
    }

    /// Whether a full sync at `now` is due only to `full_sync_period` (not the first, not
    /// forced, no failure to recover from): what kube-proxy v1.37's iptables mode skips in
    /// large-cluster mode.
    pub fn full_is_periodic(&self, now: Instant) -> bool {
        !self.forced && self.failures == 0 && self.last_full.is_some_and(|t| now >= t + self.timing.full_sync_period)
    }

    /// The next sync must be a full one (the kernel lost rules behind our back); it runs
    /// as soon as a change would (no earlier than `min_sync_period` after the last sync).
    pub fn force_full(&mut self, now: Instant) {
        self.forced = true;
        self.pending_since.get_or_insert(now);
    }

    /// Whether a sync at `now` is every family's. kube-proxy runs one proxier per family,
    /// each syncing for its own reasons: every one syncs at the first sync, a full one (due
    /// or forced) and a periodic one (a sync period since the last sync; the loop also
    /// counts the sync after a canary check, due once per sync period). Any other sync is
    /// for the families with changes, and for a family whose last sync failed.
    pub fn every_family(&self, now: Instant) -> bool {
        let (Some(last_sync), Some(last_full)) = (self.last_sync, self.last_full) else { return true };
        self.forced || now >= last_full + self.timing.full_sync_period || now >= last_sync + self.timing.sync_period
    }

    /// Whether a sync at `now` is the periodic one (and the canaries, in a mode with
    /// them, should be checked before it): once per `sync_period`, counted from the last
    /// periodic sync or full sync (which recreates the canaries).
    pub fn canary_due(&self, now: Instant) -> bool {
        let Some(last_full) = self.last_full else { return false };
        now >= self.periodic_base(last_full) + self.timing.sync_period
    }

    /// What the next periodic sync counts from: the last periodic sync, or the last full
    /// sync.
    fn periodic_base(&self, last_full: Instant) -> Instant {
        self.last_periodic.map_or(last_full, |c| c.max(last_full))
    }

    /// The canaries were checked at `now`, before the periodic sync.
    pub fn canary_checked(&mut self, now: Instant) {
        self.last_periodic = Some(now);
    }

    /// A sync starts now: it covers every change so far; later ones stay pending. When
    /// the periodic sync is due it is this one, and the next counts from now.
    pub fn begin(&mut self, now: Instant) -> Kind {
        if self.canary_due(now) {
            self.last_periodic = Some(now);
        }
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
                self.forced = false;
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
    fn the_first_sync_is_due_from_when_the_sources_were_ready_even_while_it_runs() {
        let base = Instant::now();
        let mut s = Schedule::new(Timing::default());
        s.set_ready(t(base, 5));
        assert_eq!(s.next(), Some(t(base, 5)));
        s.begin(t(base, 9));
        assert_eq!(s.next(), Some(t(base, 5)), "the running first sync is still the one due");
        s.done(t(base, 9), t(base, 20), Kind::Full, true);
        assert_eq!(s.next(), Some(t(base, 9) + Timing::default().sync_period));
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
        assert_eq!(s.next(), Some(t(base, 30_000)), "then the periodic sync");
        assert_eq!(s.kind(t(base, 30_000)), Kind::Partial);
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

    /// A successful first sync at `base` (full).
    fn started(timing: Timing, base: Instant) -> Schedule {
        let mut s = Schedule::new(timing);
        s.set_ready(base);
        assert_eq!(s.begin(base), Kind::Full);
        s.done(base, t(base, 10), Kind::Full, true);
        s
    }

    /// Does what the loop does at the next wake-up (the canary check when due, then the
    /// sync); returns when the sync ran and its kind.
    fn run_next(s: &mut Schedule) -> (Instant, Kind) {
        let at = s.next().expect("ready");
        if s.canary_due(at) {
            s.canary_checked(at);
        }
        let kind = s.begin(at);
        s.done(at, at, kind, true);
        (at, kind)
    }

    #[test]
    fn a_full_sync_is_periodic_only_when_neither_first_forced_nor_a_retry() {
        let base = Instant::now();
        let timing = Timing { full_sync_period: Duration::from_secs(3600), ..Timing::default() };
        let mut s = Schedule::new(timing);
        s.set_ready(base);
        assert!(!s.full_is_periodic(base), "the first full sync is not periodic");
        s.begin(base);
        s.done(base, t(base, 10), Kind::Full, true);
        assert!(!s.full_is_periodic(t(base, 1_000)), "not due yet");
        assert!(s.full_is_periodic(t(base, 3_600_100)));
        s.force_full(t(base, 3_600_100));
        assert!(!s.full_is_periodic(t(base, 3_600_100)), "forced (a canary lost) is not periodic");
    }

    #[test]
    fn periodic_syncs_are_partial_and_a_full_one_runs_every_full_sync_period() {
        let base = Instant::now();
        let timing = Timing { sync_period: Duration::from_secs(30), full_sync_period: Duration::from_secs(3600), ..Timing::default() };
        let mut s = started(timing, base);
        let mut kinds = Vec::new();
        for _ in 0..250 {
            kinds.push(run_next(&mut s));
        }
        assert_eq!(kinds[0], (t(base, 30_000), Kind::Partial), "a sync period after the first");
        assert!(kinds.windows(2).all(|w| w[1].0 - w[0].0 <= Duration::from_secs(30)), "one every sync period");
        let full: Vec<Instant> = kinds.iter().filter(|k| k.1 == Kind::Full).map(|k| k.0).collect();
        assert_eq!(full, [t(base, 3_600_000), t(base, 7_200_000)], "full only once an hour has passed");
    }

    /// A mode without canaries never checks any: the periodic sync itself moves the
    /// count on, so it comes once per sync period and not back to back.
    #[test]
    fn without_canary_checks_periodic_syncs_come_one_per_sync_period() {
        let base = Instant::now();
        let mut s = started(Timing::default(), base);
        let mut at = Vec::new();
        for _ in 0..5 {
            let next = s.next().expect("ready");
            let kind = s.begin(next);
            s.done(next, next, kind, true);
            at.push(next);
        }
        assert_eq!(at, [t(base, 30_000), t(base, 60_000), t(base, 90_000), t(base, 120_000), t(base, 150_000)]);
        // Changes in between do not put the periodic sync off.
        s.changed(t(base, 160_000));
        let next = s.next().unwrap();
        let kind = s.begin(next);
        s.done(next, next, kind, true);
        assert_eq!(next, t(base, 160_000));
        assert_eq!(s.next(), Some(t(base, 180_000)));
    }

    #[test]
    fn a_change_inside_the_full_sync_period_is_partial() {
        let base = Instant::now();
        let mut s = started(Timing::default(), base);
        s.changed(t(base, 40_000));
        assert_eq!(s.next(), Some(t(base, 30_000)), "the periodic sync comes first");
        run_next(&mut s);
        s.changed(t(base, 40_000));
        assert_eq!(run_next(&mut s), (t(base, 40_000), Kind::Partial));
        s.changed(t(base, 3_600_000));
        assert_eq!(s.kind(t(base, 3_600_000)), Kind::Full, "an hour after the last full sync");
    }

    #[test]
    fn force_full_makes_the_next_sync_full_once_and_soon() {
        let base = Instant::now();
        let mut s = started(Timing::default(), base);
        assert_eq!(s.kind(t(base, 5_000)), Kind::Partial);
        s.force_full(t(base, 5_000));
        assert_eq!(s.next(), Some(t(base, 5_000)), "not waiting for the periodic sync");
        assert_eq!(run_next(&mut s), (t(base, 5_000), Kind::Full));
        assert_eq!(run_next(&mut s).1, Kind::Partial, "once");

        // Right after a sync it waits min_sync_period; a failed forced sync is retried full.
        let mut s = started(Timing::default(), base);
        s.force_full(t(base, 100));
        assert_eq!(s.next(), Some(t(base, 1_000)));
        assert_eq!(s.begin(t(base, 1_000)), Kind::Full);
        s.done(t(base, 1_000), t(base, 1_100), Kind::Full, false);
        assert_eq!(run_next(&mut s), (t(base, 2_100), Kind::Full));
        assert_eq!(run_next(&mut s).1, Kind::Partial);
    }

    #[test]
    fn canaries_are_due_once_per_sync_period_even_under_constant_change() {
        let base = Instant::now();
        let mut s = started(Timing::default(), base);
        assert!(!s.canary_due(t(base, 29_999)), "the full sync just recreated them");
        assert!(s.canary_due(t(base, 30_000)));
        s.canary_checked(t(base, 30_000));
        assert!(!s.canary_due(t(base, 30_001)));
        // A change every 5 s keeps syncing; the check still comes every sync period.
        let mut checks = Vec::new();
        for i in 1..=30u64 {
            s.changed(t(base, 30_000 + i * 5_000));
            let at = s.next().unwrap();
            if s.canary_due(at) {
                s.canary_checked(at);
                checks.push(at);
            }
            let kind = s.begin(at);
            s.done(at, at, kind, true);
        }
        assert_eq!(checks, [t(base, 60_000), t(base, 90_000), t(base, 120_000), t(base, 150_000), t(base, 180_000)]);
        // Idle: the next wake-up is the check, a sync period after the last one.
        let mut s = started(Timing::default(), base);
        s.canary_checked(t(base, 10_000));
        s.done(t(base, 20_000), t(base, 20_000), Kind::Partial, true);
        assert_eq!(s.next(), Some(t(base, 40_000)));
        assert!(!s.canary_due(t(base, 39_999)) && s.canary_due(t(base, 40_000)));
        assert!(!Schedule::new(Timing::default()).canary_due(base), "no check before the first full sync");
    }
}
