//! Tests of the manifests source: parsing and its limits, the depth
//! pre-scan, and watching (rescans, batches, slow and superseded reads).

use super::depth::yaml_too_deep;
use super::parse::{parse_file, shift_lines};
use super::watch::is_manifest_path;
use super::*;

fn parse(name: &str, text: &str) -> Result<Vec<(String, usize)>, Vec<String>> {
    parse_limited(name, text, ManifestLimits::default())
        .map(|docs| docs.into_iter().map(|d| (d.key, d.line)).collect())
        .map_err(|errs| errs.into_iter().map(|e| e.to_string()).collect())
}

fn parse_limited(name: &str, text: &str, limits: ManifestLimits) -> Result<Vec<Doc>, Vec<ManifestError>> {
    parse_file(Path::new(name), text, &ManifestFilter::default(), &limits, &|| true).expect("not abandoned")
}

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n";

#[test]
fn multi_document_yaml_with_lines() {
    let text = format!(
        "# leading comment\n{CM}---\n# about b\n\nkind: Secret\napiVersion: v1\nmetadata: {{name: b}}\n---\n---\n...\n"
    );
    assert_eq!(parse("f.yaml", &text).unwrap(), vec![("ns/a".into(), 2), ("b".into(), 10)]);
}

#[test]
fn document_markers_with_content_and_end_markers() {
    let text =
        "--- {apiVersion: v1, kind: A, metadata: {name: x}}\n...\napiVersion: v1\nkind: A\nmetadata: {name: y}\n";
    assert_eq!(parse("f.yml", text).unwrap(), vec![("x".into(), 1), ("y".into(), 3)]);
}

#[test]
fn empty_and_comment_only_files_hold_nothing() {
    assert_eq!(parse("f.yaml", "").unwrap(), vec![]);
    assert_eq!(parse("f.yaml", "# nothing\n---\n# here\n").unwrap(), vec![]);
    assert_eq!(parse("f.json", " \n").unwrap(), vec![]);
}

#[test]
fn syntax_error_lines_are_file_lines() {
    let text = format!("{CM}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n");
    let errs = parse("bad.yaml", &text).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    // The flow sequence opened on line 10 runs to the end of the file.
    assert_eq!(
        errs[0],
        "bad.yaml:11:1: did not find expected ',' or ']', while parsing a flow sequence at line 10 column 9"
    );
}

#[test]
fn a_syntax_error_mid_file_names_its_line_and_other_documents_still_parse() {
    let text = "apiVersion: v1\nkind: A\nmetadata: {name: a}\n---\napiVersion: v1\nkind: A\nmetadata:\n  name: b\n bad: x\n---\napiVersion: v1\nkind: A\nmetadata: {}\n";
    let errs = parse("m.yaml", text).unwrap_err();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].starts_with("m.yaml:9:"), "{}", errs[0]);
    assert_eq!(errs[1], "m.yaml:11: manifest has no metadata.name");
}

#[test]
fn crlf_line_endings() {
    let text = "apiVersion: v1\r\nkind: A\r\nmetadata: {name: a}\r\n---\r\n\r\napiVersion: v1\r\nkind: A\r\nmetadata: {name: b}\r\n";
    assert_eq!(parse("f.yaml", text).unwrap(), vec![("a".into(), 1), ("b".into(), 6)]);
}

#[test]
fn document_errors_name_the_document_line() {
    let text = format!("{CM}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: x\n");
    assert_eq!(parse("f.yaml", &text).unwrap_err(), vec!["f.yaml:7: manifest has no metadata.name"]);
    assert_eq!(
        parse("f.yaml", "- a\n- b\n").unwrap_err(),
        vec!["f.yaml:1: a manifest must be a mapping, found a list"]
    );
    let labels = "apiVersion: v1\nkind: A\nmetadata:\n  name: a\n  labels: {n: 1}\n";
    assert_eq!(
        parse("f.yaml", labels).unwrap_err(),
        vec!["f.yaml:1: metadata.labels.n must be a string, found a number"]
    );
    assert_eq!(
        parse("f.yaml", "kind: A\nmetadata: {name: a}\n").unwrap_err(),
        vec!["f.yaml:1: manifest has no apiVersion"]
    );
}

#[test]
fn json_files_and_streams() {
    let text = "{\"apiVersion\":\"v1\",\"kind\":\"A\",\"metadata\":{\"name\":\"a\"}}\n\n  {\"apiVersion\":\"v1\",\"kind\":\"A\",\"metadata\":{\"name\":\"b\"}}";
    assert_eq!(parse("f.json", text).unwrap(), vec![("a".into(), 1), ("b".into(), 3)]);
    let errs = parse("f.json", "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \n}").unwrap_err();
    assert_eq!(errs, vec!["f.json:4:1: expected value"]);
}

#[test]
fn lists_expand_and_typed_lists_fill_kind() {
    let text = "apiVersion: v1\nkind: ConfigMapList\nitems:\n- metadata: {name: a, namespace: n}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n";
    let docs = parse_limited("l.yaml", text, ManifestLimits::default()).unwrap();
    assert_eq!(docs.iter().map(|d| d.key.as_str()).collect::<Vec<_>>(), ["n/a", "b"]);
    assert_eq!(docs[0].value["kind"], "ConfigMap");
    assert_eq!(docs[0].value["apiVersion"], "v1");
    let bad = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: A\n  metadata: {}\n";
    assert_eq!(
        parse("l.yaml", bad).unwrap_err(),
        vec!["l.yaml:1: items[0] of the List: manifest has no metadata.name"]
    );
}

#[test]
fn merge_keys_and_anchors() {
    let text = "apiVersion: v1\nkind: A\nmetadata:\n  name: a\n  labels: &l {x: y}\ndata:\n  <<: *l\n  z: w\n";
    let docs = parse_limited("m.yaml", text, ManifestLimits::default()).unwrap();
    assert_eq!(docs[0].value["data"], serde_json::json!({"x": "y", "z": "w"}));
}

#[test]
fn filter_selects() {
    let f =
        ManifestFilter::default().api_version("v1").kind("ConfigMap").namespace("ns").labels("app in (a,b)").unwrap();
    let v = |av: &str, k: &str, ns: Option<&str>, app: &str| {
        let mut m = serde_json::json!({"apiVersion": av, "kind": k, "metadata": {"name": "x", "labels": {"app": app}}});
        if let Some(ns) = ns {
            m["metadata"]["namespace"] = ns.into();
        }
        m
    };
    assert!(f.matches(&v("v1", "ConfigMap", Some("ns"), "a")));
    assert!(!f.matches(&v("v2", "ConfigMap", Some("ns"), "a")));
    assert!(!f.matches(&v("v1", "Secret", Some("ns"), "a")));
    assert!(!f.matches(&v("v1", "ConfigMap", None, "a")));
    assert!(!f.matches(&v("v1", "ConfigMap", Some("ns"), "c")));
    assert!(ManifestFilter::default().matches(&v("v9", "X", None, "q")));
    assert_eq!(ManifestFilter::default().to_string(), "everything");
    assert_eq!(f.to_string(), "apiVersion=v1 kind=ConfigMap namespace=ns labels=app in (a,b)");
}

/// Test-only: holds the reads of chosen files in flight, as a slow
/// parse would, until the test releases them.
pub(super) mod gate {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use parking_lot::{Condvar, Mutex};

    static GATES: Mutex<BTreeMap<PathBuf, Arc<Gate>>> = Mutex::new(BTreeMap::new());

    #[derive(Default)]
    pub struct Gate {
        entered: AtomicBool,
        open: Mutex<bool>,
        opened: Condvar,
    }

    /// Releases the gate when dropped, so a failing test never leaves
    /// a blocking thread behind.
    pub struct Hold(PathBuf, Arc<Gate>);

    impl Hold {
        pub fn entered(&self) -> bool {
            self.1.entered.load(Ordering::SeqCst)
        }
        pub fn release(&self) {
            GATES.lock().remove(&self.0);
            *self.1.open.lock() = true;
            self.1.opened.notify_all();
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            self.release();
        }
    }

    /// Every read of `path` from now on blocks until the hold is released.
    pub fn hold(path: &Path) -> Hold {
        let gate = Arc::new(Gate::default());
        GATES.lock().insert(path.to_path_buf(), gate.clone());
        Hold(path.to_path_buf(), gate)
    }

    /// Called by the source before it reads a file.
    pub fn before_read(path: &Path) {
        let Some(gate) = GATES.lock().get(path).cloned() else { return };
        gate.entered.store(true, Ordering::SeqCst);
        let mut open = gate.open.lock();
        while !*open {
            gate.opened.wait(&mut open);
        }
    }
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    // The integration tests' bound: filesystem events need real time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out after 10s waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A file whose read and parse is still running (held by a gate, as a
/// slow parse would be) does not hold up another file's update: the
/// other file's change is applied while the first is in flight, and the
/// first is applied once it finishes. The held file is large (300 KB),
/// as a slow one would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_in_flight_does_not_hold_up_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let cm = |name: &str, value: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{value: {value}}}\n")
    };
    let big = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: slow}}\ndata:\n  value: {value}\n  padding: {}\n",
            "p".repeat(300_000)
        )
    };
    std::fs::write(dir.path().join("a.yaml"), cm("a", "one")).unwrap();
    std::fs::write(dir.path().join("slow.yaml"), big("one")).unwrap();
    let src = ManifestsSource::open(dir.path(), ManifestFilter::default()).unwrap();
    let value = |key: &str| {
        src.get(key).and_then(|o| o.pointer_value("/data/value")).and_then(|v| v.as_str().map(String::from))
    };
    assert_eq!((value("a").as_deref(), value("slow").as_deref()), (Some("one"), Some("one")), "{:?}", src.errors());
    // The watch task's first full rescan is done before the gate goes up.
    eventually("the watch task's first rescan", || src.scan_count() >= 2).await;

    let slow = src.dir().join("slow.yaml");
    let held = gate::hold(&slow);
    std::fs::write(&slow, big("two")).unwrap();
    eventually("the read of slow.yaml to start", || held.entered()).await;
    std::fs::write(src.dir().join("a.yaml"), cm("a", "two")).unwrap();
    eventually("a's update while slow.yaml is in flight", || value("a").as_deref() == Some("two")).await;
    assert_eq!(value("slow").as_deref(), Some("one"), "slow.yaml is still being read");

    held.release();
    eventually("slow.yaml's update once released", || value("slow").as_deref() == Some("two")).await;
    assert!(src.errors().is_empty(), "{:?}", src.errors());
}

/// Depth of a YAML document as serde_yaml loads it, keys included.
fn serde_depth(text: &str) -> usize {
    fn depth(v: &serde_yaml::Value) -> usize {
        match v {
            serde_yaml::Value::Sequence(s) => 1 + s.iter().map(depth).max().unwrap_or(0),
            serde_yaml::Value::Mapping(m) => 1 + m.iter().map(|(k, v)| depth(k).max(depth(v))).max().unwrap_or(0),
            serde_yaml::Value::Tagged(t) => depth(&t.value),
            _ => 0,
        }
    }
    depth(&serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}")))
}

/// The pass before parsing never counts more levels than a document
/// has (no valid document is refused), and counts every level where
/// flow collections and block indentation nest, whatever is skipped in
/// between: comments, quoted, plain and block scalars full of brackets.
#[test]
fn depth_check_counts_levels_as_libyaml_nests_them() {
    // (text, whether every level opens a flow or indentation level)
    let cases: &[(&str, bool)] = &[
        ("a:\n  b:\n    c: [1, {d: [x]}]\n", true),
        ("data:\n  script: |\n    [[[[[[ {{{{\n     [[[[\n\n    ]]\n  other: [x]\n", true),
        ("data:\n  f: >-2\n      [[[[[[\n  g: {h: 1}\n", true),
        ("a: \"[[[\n  {{{ \\\" [[\"\nb: '[[[[ '' [[['\nc: [x]\n", true),
        ("a: some text [\n  [[ more {{\nb: [x]\n", true),
        ("# [[[[\na: 1 # {{{{\nb: [[1]] # [[[[\n", true),
        ("- - - - x\n", true),
        ("{a: [b], c: {d: e}}\n", true),
        ("a: &x !!seq [1, [2]]\n", true),
        ("a: [\n  [\n    1\n  ]\n]\n", true),
        ("a:\r\n  b: [x]\r\n", true),
        ("k: 'it''s [ok'\nl: \"[\" # ]\nm: a[0]\nn: [a(0), b]\n", true),
        ("%YAML 1.1\n---\na: [b, [c]]\n...\n", true),
        ("? [a]\n: [b, [c]]\n", true),
        // Levels that open no level of their own: fewer counted.
        ("a:\n- - x\n", false),
        ("[a, b]: c\n", false),
        ("[a: [b]]\n", false),
    ];
    for (text, exact) in cases {
        let depth = serde_depth(text);
        assert_eq!(yaml_too_deep(text, depth), None, "refused at its own depth {depth}: {text:?}");
        if *exact {
            assert!(yaml_too_deep(text, depth - 1).is_some(), "depth {depth} not counted: {text:?}");
        }
    }
    // Where the first level too many opens.
    assert_eq!(yaml_too_deep(&"[".repeat(200), 128), Some((0, 128)));
    assert_eq!(yaml_too_deep(&format!("a: {}", "{b: ".repeat(200)), 128), Some((0, 3 + 4 * 127)));
    assert_eq!(yaml_too_deep(&format!("{}x\n", "- ".repeat(200)), 128), Some((0, 256)));
    let indented: String = (0..200).map(|i| format!("{}k:\n", "  ".repeat(i))).collect();
    assert_eq!(yaml_too_deep(&indented, 128), Some((128, 256)));
    // After a syntax error libyaml stops, and so does the check.
    assert_eq!(yaml_too_deep(&format!("a: b: {}", "[".repeat(200)), 128), None);
}

#[test]
fn too_deep_documents_name_the_line_column_and_limit() {
    let deep = format!("{CM}---\n# deep\nitems: {}\n", "[".repeat(200));
    let errs = parse("d.yaml", &deep).unwrap_err();
    assert_eq!(errs, vec!["d.yaml:8:135: nested deeper than 128 levels"]);
    // A lower limit; a sequence at its key's indentation is counted
    // after parsing, at the document's line.
    let limits = ManifestLimits { max_depth: 2, ..ManifestLimits::default() };
    let errs = parse_limited("d.yaml", "a: [[x]]\n", limits).unwrap_err();
    assert_eq!(errs[0].to_string(), "d.yaml:1:5: nested deeper than 2 levels");
    let errs = parse_limited("d.yaml", "# c\na:\n- - x\n", limits).unwrap_err();
    assert_eq!(errs[0].to_string(), "d.yaml:2: nested deeper than 2 levels");
    // JSON: checked in the same pass as document sizes.
    let errs = parse_limited("d.json", "{\"a\": 1}\n{\"b\":\n [[1]]}", limits).unwrap_err();
    assert_eq!(errs[0].to_string(), "d.json:3:3: nested deeper than 2 levels");
    assert_eq!(
        parse("d.json", &format!("{}{}", "[".repeat(129), "]".repeat(129))).unwrap_err(),
        vec!["d.json:1:129: nested deeper than 128 levels"]
    );
}

#[test]
fn documents_over_the_size_limit_are_not_parsed() {
    let limits = ManifestLimits { max_document_bytes: 100, ..ManifestLimits::default() };
    let big = format!("{CM}data: {{v: {}}}\n", "x".repeat(100));
    let errs = parse_limited("s.yaml", &format!("{CM}---\n{big}"), limits).unwrap_err();
    let size = big.len() + 4; // with its `---` line
    assert_eq!(
        errs[0].to_string(),
        format!("s.yaml:7: the document is {size} bytes, over the limit of 100 bytes per document")
    );
    let json = format!("{{\"a\": 1}}\n\n{{\"b\": \"{}\"}}", "y".repeat(100));
    let errs = parse_limited("s.json", &json, limits).unwrap_err();
    assert_eq!(errs[0].to_string(), "s.json:3: the document is 109 bytes, over the limit of 100 bytes per document");
}

#[test]
fn a_file_keeps_ten_errors_and_counts_the_rest() {
    let text: String = (0..25).map(|i| format!("apiVersion: v1\nkind: A\nmetadata: {{name: [n{i}\n---\n")).collect();
    let errs = parse("e.yaml", &text).unwrap_err();
    assert_eq!(errs.len(), 11);
    assert!(errs[9].starts_with("e.yaml:40:1: "), "{}", errs[9]);
    assert_eq!(errs[10], "e.yaml: and 15 more errors");
}

#[test]
fn duplicates_are_reported_ten_per_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), CM).unwrap();
    std::fs::write(dir.path().join("b.yaml"), vec![CM; 14].join("---\n")).unwrap();
    let src = ManifestsSource::open(dir.path(), ManifestFilter::default()).unwrap();
    let errors: Vec<String> = src.errors().iter().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 11, "{errors:?}");
    assert!(errors[0].contains("b.yaml:1: ns/a is already defined in "), "{}", errors[0]);
    assert!(errors[10].ends_with("b.yaml: and 4 more duplicate definitions"), "{}", errors[10]);
}

#[test]
fn syntax_errors_of_later_documents_shift_every_line_in_the_message() {
    assert_eq!(
        shift_lines("x at line 2 column 9, y at line 3 column 1", 10),
        "x at line 12 column 9, y at line 13 column 1"
    );
    assert_eq!(shift_lines("no location", 10), "no location");
}

/// Reads of one file apply in the order they started, whatever order
/// they finish in.
#[test]
fn an_older_read_never_overwrites_a_newer_one() {
    let dir = tempfile::tempdir().unwrap();
    let cm =
        |value: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata: {{value: {value}}}\n");
    std::fs::write(dir.path().join("a.yaml"), cm("one")).unwrap();
    let src = ManifestsSource::open(dir.path(), ManifestFilter::default()).unwrap();
    let shared = &src.inner.shared;
    let path = src.dir().join("a.yaml");
    let value = || src.get("a").and_then(|o| o.pointer_value("/data/value")).and_then(|v| v.as_str().map(String::from));

    std::fs::write(&path, cm("two")).unwrap();
    let first = shared.begin_read(&path);
    let older = shared.read_file(path.clone(), first, None);
    std::fs::write(&path, cm("three")).unwrap();
    let second = shared.begin_read(&path);
    let newer = shared.read_file(path.clone(), second, None);
    shared.apply(&[], Vec::new(), vec![newer]);
    shared.apply(&[], Vec::new(), vec![older]);
    assert_eq!(value().as_deref(), Some("three"));
    // The other order: the older one is dropped as soon as the newer starts.
    std::fs::write(&path, cm("four")).unwrap();
    let first = shared.begin_read(&path);
    let older = shared.read_file(path.clone(), first, None);
    let second = shared.begin_read(&path);
    let newer = shared.read_file(path.clone(), second, None);
    shared.apply(&[], Vec::new(), vec![older]);
    assert_eq!(value().as_deref(), Some("three"));
    shared.apply(&[], Vec::new(), vec![newer]);
    assert_eq!(value().as_deref(), Some("four"));
    assert!(shared.latest_read.lock().is_empty());
}

#[test]
fn manifest_paths() {
    assert!(is_manifest_path(Path::new("/a/b.yaml")));
    assert!(is_manifest_path(Path::new("/a/b.YML")));
    assert!(is_manifest_path(Path::new("b.json")));
    assert!(!is_manifest_path(Path::new("/a/.b.yaml")));
    assert!(!is_manifest_path(Path::new("/a/b.yaml.swp")));
    assert!(!is_manifest_path(Path::new("/a/b")));
}
