//! The metrics port's profiling endpoints with `--profiling` (kube-proxy installs Go's
//! `net/http/pprof` there). What fits a Rust process: `/debug/pprof/profile?seconds=N`, a
//! CPU profile sampled at 100 Hz for N seconds (30 by default, as Go's) by pprof-rs,
//! written in pprof's protobuf format so `go tool pprof` and other pprof readers take it
//! as they take kube-proxy's; `/debug/pprof/cmdline` (the arguments, NUL-separated, as
//! Go's); and `/debug/pprof/`, an index saying what is served. Go's heap, goroutine,
//! block, mutex and trace profiles have no counterpart here.
//!
//! The profile is encoded by [`encode`] (pure) from a [`CpuProfile`].

use std::collections::HashMap;

/// One sampled stack: thread name, frames leaf first, samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub thread: String,
    pub frames: Vec<String>,
    pub count: u64,
}

/// A CPU profile: stacks with their sample counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuProfile {
    pub stacks: Vec<Stack>,
    /// Sampling period in nanoseconds (10 ms at 100 Hz).
    pub period_nanos: i64,
    pub time_nanos: i64,
    pub duration_nanos: i64,
}

/// Sampling frequency, Go's CPU profiler's.
pub const HZ: i32 = 100;
/// The longest profile served (a scrape timeout is usually far shorter).
pub const MAX_SECONDS: u64 = 300;

/// Protobuf writer for the few wire types pprof's `profile.proto` uses.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }
    fn int(&mut self, field: u32, v: i64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v as u64);
        }
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn packed(&mut self, field: u32, values: &[u64]) {
        let mut inner = Pb::default();
        values.iter().for_each(|v| inner.varint(*v));
        self.bytes(field, &inner.0);
    }
}

/// The string table: index 0 is "" (pprof requires it).
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if self.table.is_empty() {
            self.table.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn value_type(s: &mut Strings, kind: &str, unit: &str) -> Vec<u8> {
    let mut m = Pb::default();
    m.int(1, s.id(kind));
    m.int(2, s.id(unit));
    m.0
}

/// `profile.proto`'s Profile: sample types samples/count and cpu/nanoseconds, one location
/// and function per distinct frame name, a `thread` label per sample.
pub fn encode(p: &CpuProfile) -> Vec<u8> {
    let mut s = Strings::default();
    s.id("");
    let mut out = Pb::default();
    let (samples, cpu) = (value_type(&mut s, "samples", "count"), value_type(&mut s, "cpu", "nanoseconds"));
    out.bytes(1, &samples);
    out.bytes(1, &cpu);
    let thread_key = s.id("thread");
    let mut functions: Vec<String> = Vec::new();
    let mut function_ids: HashMap<String, u64> = HashMap::new();
    for stack in &p.stacks {
        let ids: Vec<u64> = stack
            .frames
            .iter()
            .map(|f| {
                *function_ids.entry(f.clone()).or_insert_with(|| {
                    functions.push(f.clone());
                    functions.len() as u64
                })
            })
            .collect();
        let mut sample = Pb::default();
        sample.packed(1, &ids);
        sample.packed(2, &[stack.count, stack.count.saturating_mul(p.period_nanos.max(0) as u64)]);
        let mut label = Pb::default();
        label.int(1, thread_key);
        label.int(2, s.id(&stack.thread));
        sample.bytes(3, &label.0);
        out.bytes(2, &sample.0);
    }
    for (i, name) in functions.iter().enumerate() {
        let id = i as u64 + 1;
        let mut line = Pb::default();
        line.int(1, id as i64);
        let mut loc = Pb::default();
        loc.int(1, id as i64);
        loc.bytes(4, &line.0);
        out.bytes(4, &loc.0);
        let mut func = Pb::default();
        func.int(1, id as i64);
        let name_id = s.id(name);
        func.int(2, name_id);
        func.int(3, name_id);
        out.bytes(5, &func.0);
    }
    let period = value_type(&mut s, "cpu", "nanoseconds");
    for text in &s.table {
        out.bytes(6, text.as_bytes());
    }
    out.int(9, p.time_nanos);
    out.int(10, p.duration_nanos);
    out.bytes(11, &period);
    out.int(12, p.period_nanos);
    out.0
}

/// Samples the whole process for `seconds` and returns what it saw.
pub async fn sample(seconds: u64) -> Result<CpuProfile, pprof::Error> {
    let started = std::time::SystemTime::now();
    let guard = pprof::ProfilerGuardBuilder::default().frequency(HZ).blocklist(&["libc", "libgcc", "pthread", "vdso"]).build()?;
    tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    let report = guard.report().build()?;
    let stacks = report
        .data
        .iter()
        .map(|(frames, count)| Stack {
            thread: frames.thread_name_or_id(),
            frames: frames.frames.iter().flatten().map(|sym| sym.name()).collect(),
            count: (*count).max(0) as u64,
        })
        .collect();
    let time_nanos = started.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    Ok(CpuProfile { stacks, period_nanos: 1_000_000_000 / i64::from(HZ), time_nanos, duration_nanos: (seconds * 1_000_000_000) as i64 })
}

/// `?seconds=N`: Go's default (30) when absent or unparsable, at most [`MAX_SECONDS`].
pub fn seconds(query: Option<&str>) -> u64 {
    query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("seconds=")?.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(30)
        .min(MAX_SECONDS)
}

pub const INDEX: &str = "svcproxy profiling (--profiling)\n\n\
/debug/pprof/profile?seconds=N  CPU profile, N seconds (default 30) at 100 Hz, pprof protobuf (go tool pprof reads it)\n\
/debug/pprof/cmdline            the command line, NUL-separated\n\n\
Go's heap, goroutine, block, mutex and trace profiles have no counterpart in a Rust process.\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// Top-level fields of a protobuf message as (field, wire type, payload or value).
    fn fields(mut b: &[u8]) -> Vec<(u64, u64, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let (field, wire) = (key >> 3, key & 7);
            if wire == 0 {
                let v = varint(&mut b);
                out.push((field, 0, v.to_le_bytes().to_vec()));
            } else {
                let len = varint(&mut b) as usize;
                out.push((field, 2, b[..len].to_vec()));
                b = &b[len..];
            }
        }
        out
    }

    #[test]
    fn a_profile_has_pprofs_shape() {
        let p = CpuProfile {
            stacks: vec![
                Stack { thread: "tokio-runtime-worker".into(), frames: vec!["render".into(), "sync".into()], count: 3 },
                Stack { thread: "main".into(), frames: vec!["sync".into()], count: 1 },
            ],
            period_nanos: 10_000_000,
            time_nanos: 1,
            duration_nanos: 2,
        };
        let top = fields(&encode(&p));
        let count = |f: u64| top.iter().filter(|x| x.0 == f).count();
        assert_eq!((count(1), count(2), count(4), count(5)), (2, 2, 2, 2), "2 sample types, 2 samples, 2 distinct frames");
        let strings: Vec<String> = top.iter().filter(|x| x.0 == 6).map(|x| String::from_utf8(x.2.clone()).unwrap()).collect();
        assert_eq!(strings[0], "", "string 0 is empty");
        for s in ["samples", "count", "cpu", "nanoseconds", "thread", "render", "sync", "main"] {
            assert!(strings.iter().any(|t| t == s), "{s} in {strings:?}");
        }
        // The first sample: locations [1, 2] (render, sync), values [3, 30 ms].
        let sample = fields(&top.iter().find(|x| x.0 == 2).unwrap().2);
        assert_eq!(sample[0].2, vec![1, 2]);
        assert_eq!(sample[1].2, vec![3, 0x80, 0x87, 0xa7, 0x0e], "3 and 30,000,000 as varints");
        let period = top.iter().find(|x| x.0 == 12).unwrap();
        assert_eq!(u64::from_le_bytes(period.2.clone().try_into().unwrap()), 10_000_000);
    }

    #[test]
    fn seconds_default_to_gos_and_are_capped() {
        assert_eq!(seconds(None), 30);
        assert_eq!(seconds(Some("seconds=5")), 5);
        assert_eq!(seconds(Some("debug=1&seconds=2")), 2);
        assert_eq!(seconds(Some("seconds=0")), 30);
        assert_eq!(seconds(Some("seconds=9999")), MAX_SECONDS);
    }
}
