//! Repository tasks: `cargo run -p xtask -- <task>`.
//!
//! - `demo [--debug] [ARGS...]`: builds the example plugins for
//!   wasm32-wasip2, then runs `informer-host run --config examples/host.toml
//!   ARGS...` (a release build unless `--debug`). The host replaces this
//!   process, so Ctrl-C, SIGTERM and the exit status are the host's own.
//! - `check [--debug]`: the same build, then `informer-host check` on the demo config.
//! - `plugins`: builds the plugins only and prints where they are.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context as _, bail};

const USAGE: &str =
    "usage: cargo run -p xtask -- <demo [--debug] [informer-host run args...] | check [--debug] | plugins>";

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
