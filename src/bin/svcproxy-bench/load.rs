//! `svcproxy-bench load`: reading cluster files in process (read, parse, convert: the
//! file source) and feeding what was read to fresh trackers (track), timed per file. The
//! files are taken in turn, run after run, so a busy machine slows them alike.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use svcproxy::bench;
use svcproxy::source;

/// One file's timings over the runs.
struct Times {
    path: PathBuf,
    read: Vec<Duration>,
    track: Vec<Duration>,
    objects: usize,
}

/// Reads and tracks every file in `files` `runs` times each and prints, per file, the
/// median and the fastest run of each phase as a markdown table.
pub fn run(files: &[PathBuf], runs: usize) -> anyhow::Result<String> {
    anyhow::ensure!(!files.is_empty() && runs > 0, "load needs at least one file and one run");
    let mut times: Vec<Times> = files.iter().map(|p| Times { path: p.clone(), read: vec![], track: vec![], objects: 0 }).collect();
    for _ in 0..runs {
        for t in &mut times {
            let (read, track, objects) = once(&t.path)?;
            t.read.push(read);
            t.track.push(track);
            t.objects = objects;
        }
    }
    let mut out = String::from("| file | objects | read + parse (median, best) | track (median, best) | total (median) |\n|---|---:|---:|---:|---:|\n");
    for t in &mut times {
        let total: Vec<Duration> = t.read.iter().zip(&t.track).map(|(a, b)| *a + *b).collect();
        out.push_str(&format!(
            "| {} | {} | {}, {} | {}, {} | {} |\n",
            t.path.display(),
            t.objects,
            secs(median(&t.read)),
            secs(best(&t.read)),
            secs(median(&t.track)),
            secs(best(&t.track)),
            secs(median(&total)),
        ));
    }
    Ok(out)
}

fn once(path: &Path) -> anyhow::Result<(Duration, Duration, usize)> {
    let t = Instant::now();
    let state = source::read_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let read = t.elapsed();
    let objects = state.services.len() + state.slices.len() + state.nodes.len();
    let t = Instant::now();
    let loaded = bench::load(state)?;
    let track = t.elapsed();
    drop(loaded);
    Ok((read, track, objects))
}

/// Loads `path` once, then renders its iptables rules `runs` times: the ruleset (rules as
/// values) and the restore text written from it, each timed; a markdown table of the
/// median and best of each.
pub fn render(path: &Path, runs: usize) -> anyhow::Result<String> {
    anyhow::ensure!(runs > 0, "render needs at least one run");
    let state = source::read_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let loaded = bench::load(state)?;
    let (mut ruleset, mut text, mut bytes) = (vec![], vec![], 0);
    for _ in 0..runs {
        let t = Instant::now();
        let rulesets = svcproxy::pipeline::render_iptables(&loaded);
        ruleset.push(t.elapsed());
        let t = Instant::now();
        let restore = svcproxy::pipeline::iptables_text(&rulesets);
        text.push(t.elapsed());
        bytes = restore.len();
    }
    let total: Vec<Duration> = ruleset.iter().zip(&text).map(|(a, b)| *a + *b).collect();
    Ok(format!(
        "| file | restore bytes | ruleset (median, best) | text (median, best) | render (median, best) |\n|---|---:|---:|---:|---:|\n| {} | {bytes} | {}, {} | {}, {} | {}, {} |\n",
        path.display(),
        ms(median(&ruleset)),
        ms(best(&ruleset)),
        ms(median(&text)),
        ms(best(&text)),
        ms(median(&total)),
        ms(best(&total)),
    ))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn median(d: &[Duration]) -> Duration {
    let mut v = d.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn best(d: &[Duration]) -> Duration {
    d.iter().copied().min().unwrap_or_default()
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

/// What watch mode does when one file changed: `changed` read again, the events from the
/// state read from `base` to it, fed to trackers loaded with `base` and committed; beside
/// it the same with every object of `changed` as an event (what a re-read sent before only
/// changes were). The trackers are taken back to `base`, untimed, after each run.
pub fn reread(base: &Path, changed: &Path, runs: usize) -> anyhow::Result<String> {
    use svcproxy::track::Event;
    use std::sync::Arc;
    anyhow::ensure!(runs > 0, "reread needs one run at least");
    let before = source::read_path(base).with_context(|| format!("cannot read {}", base.display()))?;
    let mut loaded = bench::load(before.clone())?;
    let (mut read, mut changes, mut every) = (vec![], vec![], vec![]);
    let (mut n_changes, mut n_every) = (0, 0);
    for _ in 0..runs {
        let t = Instant::now();
        let after = source::read_path(changed).with_context(|| format!("cannot read {}", changed.display()))?;
        read.push(t.elapsed());
        let t = Instant::now();
        let events = source::events_between(&before, &after);
        n_changes = events.len();
        events.iter().for_each(|e| loaded.trackers.apply(e));
        loaded.trackers.commit();
        changes.push(t.elapsed());
        source::events_between(&after, &before).iter().for_each(|e| loaded.trackers.apply(e));
        loaded.trackers.commit();
        let t = Instant::now();
        let mut all: Vec<Event> = after.services.iter().map(|s| Event::ServiceApplied(Arc::new(s.clone()))).collect();
        all.extend(after.slices.iter().map(|s| Event::SliceApplied(Arc::new(s.clone()))));
        n_every = all.len();
        all.iter().for_each(|e| loaded.trackers.apply(e));
        loaded.trackers.commit();
        every.push(t.elapsed());
        source::events_between(&after, &before).iter().for_each(|e| loaded.trackers.apply(e));
        loaded.trackers.commit();
    }
    Ok(format!(
        "| step | median | best |\n|---|---:|---:|\n| read + parse {} | {} | {} |\n| events + track, changes only ({n_changes} events) | {} | {} |\n| events + track, every object ({n_every} events) | {} | {} |\n",
        changed.display(),
        secs(median(&read)),
        secs(best(&read)),
        secs(median(&changes)),
        secs(best(&changes)),
        secs(median(&every)),
        secs(best(&every)),
    ))
}
