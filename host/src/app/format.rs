//! How the program writes durations, sizes, paths and plugin loads for a
//! person to read (log lines, `check`'s table, config messages).

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::plugin::PluginInfo;

/// `loaded event_log.wasm (142 KiB), compiled in 1.2s, instantiated in 80µs`.
pub fn describe_load(info: &PluginInfo) -> String {
    let file = info.file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let compiled = if info.from_cache {
        format!("loaded from the compile cache in {}", fmt_duration(info.compile_time))
    } else {
        format!("compiled in {}", fmt_duration(info.compile_time))
    };
    format!(
        "loaded {file} ({}), {compiled}, instantiated and initialised in {}",
        fmt_size(info.size_bytes),
        fmt_duration(info.instantiate_time)
    )
}

/// Removes `.` and `dir/..` from a path, for display.
pub(super) fn tidy_path(p: &Path) -> PathBuf {
    let mut out: Vec<Component> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    if out.is_empty() { PathBuf::from(".") } else { out.iter().collect() }
}

/// `1.2s`, `35ms`, `80µs`.
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{}ms", (us + 500) / 1_000)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `512 B`, `142 KiB`, `64 MiB`.
pub fn fmt_size(n: u64) -> String {
    const K: u64 = 1024;
    if n < K {
        format!("{n} B")
    } else if n < K * K {
        format!("{} KiB", n.div_ceil(K))
    } else if n < K * K * K {
        let v = n as f64 / (K * K) as f64;
        if v.fract() == 0.0 { format!("{v:.0} MiB") } else { format!("{v:.1} MiB") }
    } else {
        format!("{:.1} GiB", n as f64 / (K * K * K) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(fmt_duration(Duration::from_micros(80)), "80µs");
        assert_eq!(fmt_duration(Duration::from_micros(35_400)), "35ms");
        assert_eq!(fmt_duration(Duration::from_millis(1_234)), "1.2s");
        assert_eq!(fmt_size(512), "512 B");
        assert_eq!(fmt_size(145_000), "142 KiB");
        assert_eq!(fmt_size(64 << 20), "64 MiB");
        assert_eq!(tidy_path(Path::new("examples/../target/./x.wasm")), PathBuf::from("target/x.wasm"));
        assert_eq!(tidy_path(Path::new("../a/../b")), PathBuf::from("../b"));
    }
}
