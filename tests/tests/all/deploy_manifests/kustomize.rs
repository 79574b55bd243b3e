//! The kustomizations of `deploy/`: each parses (only the fields these
//! files use; a misspelled one fails), lists resources that exist (no remote
//! bases), lists every manifest beside it, and its `replicas` and inline
//! patches name objects it renders.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::{deploy_dir, is_kustomization, parse_docs, yaml_files};

/// The fields of a kustomization these files use; any other key (a typo)
/// fails to parse.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Kustomization {
    api_version: String,
    kind: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Vec<Value>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    replicas: Vec<KustomizeReplicas>,
    #[serde(default)]
    patches: Vec<KustomizePatch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KustomizeReplicas {
    name: String,
    count: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KustomizePatch {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    patch: Option<String>,
}

/// `(kind, name)` of every object a kustomization directory renders.
fn rendered(dir: &Path, out: &mut BTreeSet<(String, String)>) {
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    let k: Kustomization = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for r in &k.resources {
        let p = dir.join(r);
        if p.is_dir() {
            rendered(&p, out);
        } else {
            for d in parse_docs(&std::fs::read_to_string(&p).unwrap(), r) {
                out.insert((
                    d.value["kind"].as_str().unwrap().into(),
                    d.value["metadata"]["name"].as_str().unwrap().into(),
                ));
            }
        }
    }
}

#[test]
fn kustomizations_list_files_that_exist_and_patch_objects_that_exist() {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    let kustomizations: Vec<&PathBuf> = files.iter().filter(|f| is_kustomization(f)).collect();
    let names: Vec<String> =
        kustomizations.iter().map(|k| k.strip_prefix(deploy_dir()).unwrap().display().to_string()).collect();
    for want in [
        "base/kustomization.yaml",
        "overlays/single-replica/kustomization.yaml",
        "crds/kustomization.yaml",
        "examples/kustomization.yaml",
    ] {
        assert!(names.iter().any(|n| n == want), "no deploy/{want} (found {names:?})");
    }
    for file in kustomizations {
        let dir = file.parent().unwrap();
        let k: Kustomization = serde_yaml::from_str(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!((k.api_version.as_str(), k.kind.as_str()), ("kustomize.config.k8s.io/v1beta1", "Kustomization"));
        assert!(k.namespace.as_deref().is_none_or(|n| !n.is_empty()) && k.labels.iter().all(Value::is_object));
        for r in &k.resources {
            let p = dir.join(r);
            assert!(!r.contains("://"), "{}: {r}: no remote bases", file.display());
            assert!(
                p.is_file() || p.join("kustomization.yaml").is_file(),
                "{}: resource {r} is neither a file nor a kustomization directory",
                file.display()
            );
        }
        // Every manifest beside a kustomization is one of its resources.
        for f in files.iter().filter(|f| f.parent() == Some(dir) && !is_kustomization(f)) {
            let name = f.file_name().unwrap().to_str().unwrap();
            assert!(k.resources.iter().any(|r| r == name), "{}: {name} is not listed", file.display());
        }
        let mut objects = BTreeSet::new();
        rendered(dir, &mut objects);
        for r in &k.replicas {
            assert!(
                r.count >= 1 && objects.contains(&("Deployment".into(), r.name.clone())),
                "replicas of {}?",
                r.name
            );
        }
        for p in &k.patches {
            if let Some(path) = &p.path {
                assert!(dir.join(path).is_file(), "{}: patch {path} does not exist", file.display());
            }
            if let Some(text) = &p.patch {
                let v: Value = serde_yaml::from_str(text).unwrap();
                let target =
                    (v["kind"].as_str().unwrap().to_string(), v["metadata"]["name"].as_str().unwrap().to_string());
                assert!(
                    objects.contains(&target),
                    "{}: the patch targets {target:?}, which is not rendered",
                    file.display()
                );
            }
        }
    }
}
