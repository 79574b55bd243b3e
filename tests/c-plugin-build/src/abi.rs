//! The WIT a hand-written guest glue was written against, as plain text:
//! every interface a world imports or exports, with its types (resolved to
//! their definitions) and functions, one per line, without docs.
//!
//! The Go SDK (`sdk/go/abi.go`, `batch.go`) encodes memory layouts by hand; its
//! folder records this text (`abi.wit.txt`) and the build runs
//! [`check`], so any change of the WIT that could change a layout or a
//! signature fails the build until the glue is reviewed and the record
//! updated with `abi-text`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use wit_parser::{Function, Resolve, Type, TypeDefKind, TypeOwner, WorldItem};

/// The rendering of `world` of the WIT package in `wit`.
pub fn text(wit: &Path, world: &str) -> Result<String> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_dir(wit).with_context(|| format!("parsing {}", wit.display()))?;
    let world_id = resolve.select_world(&[package], Some(world))?;
    Ok(render_world(&resolve, world_id))
}

/// Fails, naming the first differing line, unless the rendering of `world`
/// is the content of `recorded`.
pub fn check(wit: &Path, world: &str, recorded: &Path) -> Result<()> {
    let now = text(wit, world)?;
    let then = std::fs::read_to_string(recorded).with_context(|| format!("reading {}", recorded.display()))?;
    if now == then {
        return Ok(());
    }
    let (a, b): (Vec<_>, Vec<_>) = (then.lines().collect(), now.lines().collect());
    let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    bail!(
        "world `{world}` of {} changed since the glue was written against {}:\n  recorded: {}\n  now:      {}\n\
         review the hand-written canonical-ABI glue beside it, then record the new text with \
         `c-plugin-build abi-text {} {world} > {}`",
        wit.display(),
        recorded.display(),
        a.get(at).unwrap_or(&"(end)"),
        b.get(at).unwrap_or(&"(end)"),
        wit.display(),
        recorded.display()
    )
}

fn render_world(resolve: &Resolve, world: wit_parser::WorldId) -> String {
    let w = &resolve.worlds[world];
    let mut out = String::new();
    for (direction, items) in [("import", &w.imports), ("export", &w.exports)] {
        for (key, item) in items {
            match item {
                WorldItem::Interface { id, .. } => {
                    let iface = &resolve.interfaces[*id];
                    let _ = writeln!(out, "{direction} {}", resolve.name_world_key(key));
                    for (name, ty) in &iface.types {
                        let _ = writeln!(out, "  type {name} = {}", definition(resolve, *ty));
                    }
                    for f in iface.functions.values() {
                        let _ = writeln!(out, "  {}", function(resolve, f));
                    }
                }
                WorldItem::Function(f) => {
                    let _ = writeln!(out, "{direction} {}", function(resolve, f));
                }
                WorldItem::Type { id: ty, .. } => {
                    let _ = writeln!(out, "{direction} type {}", definition(resolve, *ty));
                }
            }
        }
    }
    out
}

fn function(resolve: &Resolve, f: &Function) -> String {
    let params: Vec<String> = f.params.iter().map(|p| format!("{}: {}", p.name, ty(resolve, &p.ty))).collect();
    let result = f.result.as_ref().map(|t| format!(" -> {}", ty(resolve, t))).unwrap_or_default();
    format!("{}: func({}){result}", f.name, params.join(", "))
}

/// A type where it is used: named types by their owner and name.
fn ty(resolve: &Resolve, t: &Type) -> String {
    match t {
        Type::Id(id) => {
            let def = &resolve.types[*id];
            match (&def.name, def.owner) {
                (Some(name), TypeOwner::Interface(i)) => {
                    format!("{}.{name}", resolve.interfaces[i].name.as_deref().unwrap_or("?"))
                }
                _ => definition(resolve, *id),
            }
        }
        other => format!("{other:?}").to_lowercase(),
    }
}

/// What a type is: its structure, aliases followed.
fn definition(resolve: &Resolve, id: wit_parser::TypeId) -> String {
    let list = |items: Vec<String>| items.join(", ");
    match &resolve.types[id].kind {
        TypeDefKind::Type(t) => ty(resolve, t),
        TypeDefKind::Resource => "resource".into(),
        TypeDefKind::Handle(wit_parser::Handle::Own(r)) => format!("own<{}>", ty(resolve, &Type::Id(*r))),
        TypeDefKind::Handle(wit_parser::Handle::Borrow(r)) => format!("borrow<{}>", ty(resolve, &Type::Id(*r))),
        TypeDefKind::Record(r) => {
            format!(
                "record {{ {} }}",
                list(r.fields.iter().map(|f| format!("{}: {}", f.name, ty(resolve, &f.ty))).collect())
            )
        }
        TypeDefKind::Variant(v) => format!(
            "variant {{ {} }}",
            list(
                v.cases
                    .iter()
                    .map(|c| match &c.ty {
                        Some(t) => format!("{}({})", c.name, ty(resolve, t)),
                        None => c.name.clone(),
                    })
                    .collect()
            )
        ),
        TypeDefKind::Enum(e) => format!("enum {{ {} }}", list(e.cases.iter().map(|c| c.name.clone()).collect())),
        TypeDefKind::Flags(f) => format!("flags {{ {} }}", list(f.flags.iter().map(|c| c.name.clone()).collect())),
        TypeDefKind::Tuple(t) => format!("tuple<{}>", list(t.types.iter().map(|t| ty(resolve, t)).collect())),
        TypeDefKind::Option(t) => format!("option<{}>", ty(resolve, t)),
        TypeDefKind::Result(r) => format!(
            "result<{}, {}>",
            r.ok.as_ref().map(|t| ty(resolve, t)).unwrap_or_else(|| "_".into()),
            r.err.as_ref().map(|t| ty(resolve, t)).unwrap_or_else(|| "_".into())
        ),
        TypeDefKind::List(t) => format!("list<{}>", ty(resolve, t)),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
    }

    #[test]
    fn the_go_glue_was_written_against_the_current_wit() {
        let root = repo();
        check(&root.join("wit"), "batched-plugin", &root.join("sdk/go/abi.wit.txt")).unwrap();
    }

    #[test]
    fn a_changed_signature_or_layout_fails_the_check() {
        let root = repo();
        let dir = std::env::temp_dir().join(format!("abi-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let wit = std::fs::read_to_string(root.join("wit/plugin.wit")).unwrap();
        // Same flat signature (a return pointer either way), other layout.
        let changed = wit.replace("uid: func() -> option<string>;", "uid: func() -> string;");
        assert_ne!(changed, wit);
        std::fs::write(dir.join("plugin.wit"), changed).unwrap();
        std::fs::copy(root.join("wit/controller.wit"), dir.join("controller.wit")).unwrap();
        let err = check(&dir, "batched-plugin", &root.join("sdk/go/abi.wit.txt")).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("[method]object.uid: func(self: borrow<types.object>) -> option<string>"), "{err}");
        assert!(err.contains("-> string"), "{err}");
    }
}
