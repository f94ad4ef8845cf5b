//! The test API server (real list/watch protocol) lives in the library's benchmark
//! tooling, `svcproxy::bench::apiserver`, so the scale soak (`svcproxy-bench soak`) serves
//! the same protocol the tests drive.

#![allow(unused_imports)]

pub use svcproxy::bench::apiserver::*;
