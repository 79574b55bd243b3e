//! The two steps of a C plugin's build that need the component-model
//! tooling, as one small binary (instead of `cargo install wit-bindgen-cli
//! wasm-tools`, which takes several minutes to compile):
//!
//! ```text
//! c-plugin-build bindings <wit-dir> <world> <out-dir>
//!     the C bindings of <world> (`<world>.h`, `<world>.c` and
//!     `<world>_component_type.o`), as `wit-bindgen c` writes them
//!
//! c-plugin-build component <core.wasm> <out.wasm> [<wit-dir> <world>]
//!     the component of a wasm32-wasi (preview1) reactor module linked with
//!     those bindings, with wasmtime's preview1 reactor adapter, as
//!     `wasm-tools component new --adapt` makes it; given a WIT world, its
//!     type is embedded first (`wasm-tools component embed`), for a module
//!     built without bindings' objects (Go)
//!
//! c-plugin-build check-abi <wit-dir> <world> <recorded.txt>
//!     fails unless every function and type of <world>, as `abi-text`
//!     renders it, is what <recorded.txt> holds: the text the hand-written
//!     Go glue (sdk/go/abi.go) was written against
//!
//! c-plugin-build abi-text <wit-dir> <world>
//!     prints that rendering
//! ```
//!
//! `plugins/build-other-languages.sh` drives it between the two clang steps,
//! and around `go build` for the Go plugins.

mod abi;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_component::ComponentEncoder;
use wit_parser::Resolve;

const USAGE: &str = "usage:
  c-plugin-build bindings <wit-dir> <world> <out-dir>
  c-plugin-build component <core.wasm> <out.wasm> [<wit-dir> <world>]
  c-plugin-build check-abi <wit-dir> <world> <recorded.txt>
  c-plugin-build abi-text <wit-dir> <world>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args[..] {
        ["bindings", wit, world, out] => bindings(Path::new(wit), world, Path::new(out)),
        ["component", module, out] => component(Path::new(module), Path::new(out), None),
        ["component", module, out, wit, world] => {
            component(Path::new(module), Path::new(out), Some((Path::new(wit), world)))
        }
        ["check-abi", wit, world, recorded] => abi::check(Path::new(wit), world, Path::new(recorded)),
        ["abi-text", wit, world] => abi::text(Path::new(wit), world).map(|text| print!("{text}")),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("c-plugin-build: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the C bindings of `world` of the WIT package in `wit` into `out`.
/// A file whose contents did not change is left alone (its mtime too).
fn bindings(wit: &Path, world: &str, out: &Path) -> Result<()> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_dir(wit).with_context(|| format!("parsing {}", wit.display()))?;
    let world_id = resolve.select_world(&[package], Some(world))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default().build().generate(&mut resolve, world_id, &mut files)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = 0;
    for (name, contents) in files.iter() {
        let path = out.join(name);
        if std::fs::read(&path).is_ok_and(|old| old == contents) {
            continue;
        }
        write(&path, contents)?;
        written += 1;
    }
    if files.iter().next().is_none() {
        bail!("wit-bindgen-c generated nothing for world `{world}`");
    }
    if written > 0 {
        eprintln!("c-plugin-build: bindings of `{world}` in {} ({written} files written)", out.display());
    }
    Ok(())
}

/// Wraps the core module `module` into a component at `out`, first
/// embedding the type of `world` when given.
fn component(module: &Path, out: &Path, world: Option<(&Path, &str)>) -> Result<()> {
    let mut core = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    if let Some((wit, world)) = world {
        let mut resolve = Resolve::default();
        let (package, _) = resolve.push_dir(wit).with_context(|| format!("parsing {}", wit.display()))?;
        let world_id = resolve.select_world(&[package], Some(world))?;
        wit_component::embed_component_metadata(&mut core, &resolve, world_id, wit_component::StringEncoding::UTF8)
            .with_context(|| format!("embedding the type of world `{world}`"))?;
    }
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&core)
        .with_context(|| {
            format!("decoding {} (was it linked with the bindings' *_component_type.o?)", module.display())
        })?
        .adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)?
        .encode()
        .with_context(|| format!("making a component of {}", module.display()))?;
    write(out, &component)
}

/// Writes through a temporary file, so that a reader never sees half a file.
fn write(path: &Path, contents: &[u8]) -> Result<()> {
    let mut tmp = PathBuf::from(path);
    tmp.as_mut_os_string().push(".tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
