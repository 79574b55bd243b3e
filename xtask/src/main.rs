//! Repository tasks: `cargo run -p xtask -- <task>`.
//!
//! - `demo [--debug] [ARGS...]`: builds the example plugins for
//!   wasm32-wasip2, then runs `informer-host run --config examples/host.toml
//!   ARGS...` (a release build unless `--debug`). The host replaces this
//!   process, so Ctrl-C, SIGTERM and the exit status are the host's own.
//! - `check [--debug]`: the same build, then `informer-host check` on the demo config.
//! - `plugins`: builds the plugins only and prints where they are.
//! - `bench-report`: runs the benchmarks that write report fragments
//!   (`cargo bench -p informer-host --bench wasm` and `--bench scale`: their
//!   tables into `target/bench-reports/<name>.md`, their plots into
//!   `docs/plots/`), then puts each fragment into `docs/benchmarks.md`
//!   between the markers `<!-- bench-report:<name> -->` and
//!   `<!-- /bench-report:<name> -->`. `--languages` adds the per-language
//!   figures (the e2e benchmark `other_languages::bench_noop_and_metadata_per_language`,
//!   release build, which needs the Python, JavaScript and Go toolchains
//!   `plugins/build-other-languages.sh` installs). `--no-run` only puts in
//!   what the last runs wrote.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context as _, bail};

const USAGE: &str = "usage: cargo run -p xtask -- <demo [--debug] [informer-host run args...] | check [--debug] | \
                     plugins | bench-report [--no-run] [--languages]>";

/// The benchmarks `bench-report` runs, by bench target of `informer-host`;
/// each writes `target/bench-reports/<name>.md`.
const REPORTED_BENCHES: [&str; 2] = ["wasm", "scale"];

/// The e2e benchmark behind `bench-report --languages`; it writes
/// `target/bench-reports/languages.md`.
const LANGUAGES_BENCH: &str = "other_languages::bench_noop_and_metadata_per_language";

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> anyhow::Result<ExitCode> {
    let mut args = std::env::args().skip(1);
    let task = args.next().unwrap_or_default();
    let mut rest: Vec<String> = args.collect();
    let debug = match rest.first().map(String::as_str) {
        Some("--debug") => {
            rest.remove(0);
            true
        }
        _ => false,
    };
    match task.as_str() {
        "demo" => host(debug, "run", &rest),
        "check" => host(debug, "check", &rest),
        "plugins" => {
            let dir = build_plugins()?;
            println!("{}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        "bench-report" => bench_report(rest.iter().any(|a| a == "--no-run"), rest.iter().any(|a| a == "--languages")),
        "" | "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => bail!("unknown task {other:?}\n{USAGE}"),
    }
}

fn build_plugins() -> anyhow::Result<std::path::PathBuf> {
    eprintln!(
        "xtask: building the example plugins for {} (cargo build --release --manifest-path plugins/Cargo.toml)...",
        plugin_build::TARGET
    );
    let dir = plugin_build::build_all().map_err(|e| anyhow::anyhow!("building the plugins failed:\n{e}"))?;
    for name in ["event-log", "label-audit", "cache-reader", "reloader"] {
        let path = plugin_build::plugin_path(name);
        eprintln!("xtask:   {}", path.strip_prefix(plugin_build::repo_root()).unwrap_or(&path).display());
    }
    Ok(dir)
}

/// Runs the reported benchmarks (unless `no_run`), with the per-language
/// one if `languages`, then splices their fragments into docs/benchmarks.md.
fn bench_report(no_run: bool, languages: bool) -> anyhow::Result<ExitCode> {
    let root = plugin_build::repo_root();
    let mut fragments = REPORTED_BENCHES.to_vec();
    if languages {
        fragments.push("languages");
    }
    if !no_run {
        build_plugins()?;
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut runs: Vec<Vec<&str>> =
            REPORTED_BENCHES.iter().map(|bench| vec!["bench", "-p", "informer-host", "--bench", bench]).collect();
        if languages {
            runs.push(vec![
                "test",
                "--release",
                "-p",
                "e2e",
                "--test",
                "all",
                "--",
                "--ignored",
                "--nocapture",
                "--exact",
                LANGUAGES_BENCH,
            ]);
        }
        for args in runs {
            let line = format!("cargo {}", args.join(" "));
            eprintln!("xtask: {line}");
            let status = Command::new(&cargo)
                .current_dir(&root)
                .args(&args)
                .status()
                .with_context(|| format!("cannot run {line}"))?;
            if !status.success() {
                bail!("{line} failed ({status})");
            }
        }
    }
    let doc_path = root.join("docs/benchmarks.md");
    let mut doc = std::fs::read_to_string(&doc_path).with_context(|| format!("reading {}", doc_path.display()))?;
    for name in fragments {
        let fragment_path = root.join("target/bench-reports").join(format!("{name}.md"));
        let fragment = std::fs::read_to_string(&fragment_path)
            .with_context(|| format!("reading {} (run without --no-run first)", fragment_path.display()))?;
        doc = splice(&doc, name, &fragment).with_context(|| format!("in {}", doc_path.display()))?;
        eprintln!("xtask: {} ← {}", doc_path.display(), fragment_path.display());
    }
    std::fs::write(&doc_path, doc).with_context(|| format!("writing {}", doc_path.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// `doc` with what lies between the markers of `name` replaced by `fragment`.
fn splice(doc: &str, name: &str, fragment: &str) -> anyhow::Result<String> {
    let (open, close) = (format!("<!-- bench-report:{name} -->"), format!("<!-- /bench-report:{name} -->"));
    let start = doc.find(&open).with_context(|| format!("no marker {open}"))? + open.len();
    let end = start + doc[start..].find(&close).with_context(|| format!("no marker {close} after {open}"))?;
    Ok(format!("{}\n{}\n{}", &doc[..start], fragment.trim_end(), &doc[end..]))
}

/// Builds the plugins, then runs `cargo run -p informer-host -- <command>
/// --config examples/host.toml <args>` in place of this process.
fn host(debug: bool, command: &str, args: &[String]) -> anyhow::Result<ExitCode> {
    build_plugins()?;
    let root = plugin_build::repo_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root).arg("run");
    if !debug {
        cmd.arg("--release");
    }
    cmd.args(["-p", "informer-host", "--bin", "informer-host", "--"])
        .arg(command)
        .arg("--config")
        .arg(Path::new("examples").join("host.toml"))
        .args(args);
    eprintln!(
        "xtask: building and starting informer-host{} (Ctrl-C stops it)...",
        if debug { "" } else { " --release" }
    );
    exec(cmd)
}

#[cfg(unix)]
fn exec(mut cmd: Command) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt as _;
    // Only returns on failure; on success the host's signals and exit
    // status are this process's.
    let err = cmd.exec();
    Err(err).with_context(|| format!("cannot run {:?}", cmd.get_program()))
}

#[cfg(not(unix))]
fn exec(mut cmd: Command) -> anyhow::Result<ExitCode> {
    let status = cmd.status().with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    Ok(ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8))
}

#[cfg(test)]
mod tests {
    use super::splice;

    #[test]
    fn a_fragment_replaces_what_lies_between_its_markers_only() {
        let doc = "a\n<!-- bench-report:x -->\nold\n<!-- /bench-report:x -->\nb <!-- bench-report:y -->\nkeep\n<!-- /bench-report:y -->\n";
        let out = splice(doc, "x", "new\n").unwrap();
        assert_eq!(
            out,
            "a\n<!-- bench-report:x -->\nnew\n<!-- /bench-report:x -->\nb <!-- bench-report:y -->\nkeep\n<!-- /bench-report:y -->\n"
        );
        assert!(splice(doc, "z", "new").unwrap_err().to_string().contains("no marker <!-- bench-report:z -->"));
    }
}
