//! Builds the guest plugins of `plugins/` for `wasm32-wasip2` and locates the
//! resulting components, for tests and benchmarks of the host.
//!
//! The first call to [`build_all`] or [`plugin_path`] in a process runs
//!
//! ```text
//! cargo build --release --target wasm32-wasip2 \
//!     --manifest-path <repo>/plugins/Cargo.toml --target-dir <repo>/target/plugins
//! ```
//!
//! from the repository root (so `rust-toolchain.toml` applies), without the
//! outer build's settings (`CARGO_TARGET_DIR`, `RUSTFLAGS`, ...). Later calls
//! reuse its result; cargo's own lock on the target directory serializes
//! concurrent test processes, and an up-to-date build takes well under a
//! second.
//!
//! ```no_run
//! let recorder = plugin_build::plugin_path("recorder");
//! assert!(recorder.ends_with("recorder.wasm"));
//! ```

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The guest target the plugins are built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The repository root (the folder holding `plugins/` and `rust-toolchain.toml`).
pub fn repo_root() -> PathBuf {
    // This crate lives at `<repo>/tests/plugin-build`.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("plugin-build lives two levels below the repository root")
        .to_path_buf()
}

/// `<repo>/target/plugins/wasm32-wasip2/release`: where the components land.
pub fn out_dir() -> PathBuf {
    repo_root().join("target").join("plugins").join(TARGET).join("release")
}

/// Builds every plugin (once per process) and returns the folder of the
/// `.wasm` components, or the build's error output.
pub fn build_all() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(run_build).clone()
}

/// The component of plugin `name` (its folder under `plugins/`), building all
/// plugins first if this process has not yet done so.
///
/// # Panics
///
/// When the build fails (with the build's error output), or when the build
/// produced no component of that name.
pub fn plugin_path(name: &str) -> PathBuf {
    let dir = build_all().unwrap_or_else(|err| panic!("building the plugins failed:\n{err}"));
    let path = dir.join(format!("{}.wasm", name.replace('-', "_")));
    assert!(path.is_file(), "no component for plugin `{name}` at {}", path.display());
    path
}

fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    let root = repo_root();
    cmd.current_dir(&root);
    // Settings of the outer build (cargo test, cargo bench, coverage) that
    // must not leak into a build for another target and another target dir.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let leaks = matches!(
            key,
            "RUSTFLAGS"
                | "CARGO_ENCODED_RUSTFLAGS"
                | "RUSTDOCFLAGS"
                | "CARGO_ENCODED_RUSTDOCFLAGS"
                | "RUSTC_WRAPPER"
                | "RUSTC_WORKSPACE_WRAPPER"
                | "CARGO_MAKEFLAGS"
                | "MAKEFLAGS"
                | "MFLAGS"
        ) || key.starts_with("CARGO_TARGET_") // CARGO_TARGET_DIR, CARGO_TARGET_<triple>_*
            || key.starts_with("CARGO_BUILD_")
            || key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_LLVM_COV");
        if leaks {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Whether the active toolchain lacks the guest target's standard library.
fn target_missing(root: &Path) -> bool {
    let Ok(out) = Command::new("rustc").current_dir(root).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    out.status.success() && !Path::new(&sysroot).join("lib/rustlib").join(TARGET).is_dir()
}

fn run_build() -> Result<PathBuf, String> {
    let root = repo_root();
    // rust-toolchain.toml lists the target, but rustup adds a listed target
    // only when it installs the toolchain; add it to an existing one here.
    if target_missing(&root) {
        let _ = Command::new("rustup").current_dir(&root).args(["target", "add", TARGET]).status();
    }
    let manifest = root.join("plugins").join("Cargo.toml");
    let target_dir = root.join("target").join("plugins");
    let mut cmd = cargo();
    cmd.args(["build", "--release", "--target", TARGET, "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir);
    let output = cmd.output().map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !output.status.success() {
        return Err(format!(
            "{} exited with {}:\n{}",
            describe(&cmd),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(out_dir())
}

fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args().map(OsStr::to_string_lossy) {
        text.push(' ');
        text.push_str(&arg);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The component-model preamble: magic, version 0x0d, layer 1.
    const COMPONENT_PREAMBLE: [u8; 8] = *b"\0asm\x0d\x00\x01\x00";

    #[test]
    fn builds_recorder_component() {
        let path = plugin_path("recorder");
        assert_eq!(path, out_dir().join("recorder.wasm"));
        let bytes = std::fs::read(&path).expect("read recorder.wasm");
        assert!(bytes.len() > COMPONENT_PREAMBLE.len(), "recorder.wasm is too short");
        assert_eq!(bytes[..8], COMPONENT_PREAMBLE, "recorder.wasm is not a component");
    }

    #[test]
    fn dashes_map_to_underscores() {
        let path = plugin_path("label-audit");
        assert_eq!(path.file_name().and_then(OsStr::to_str), Some("label_audit.wasm"));
    }

    #[test]
    fn repo_root_holds_the_plugins() {
        assert!(repo_root().join("plugins").join("Cargo.toml").is_file());
        assert!(repo_root().join("rust-toolchain.toml").is_file());
    }
}
