//! Parsing one file: its YAML or JSON documents, checked against the
//! limits before each is parsed, turned into JSON, validated and selected.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Doc, MAX_ERRORS_PER_FILE, ManifestError, ManifestFilter, ManifestLimits};

use super::depth::yaml_too_deep;

/// Parses one file into its selected documents, or its errors (the first
/// [`MAX_ERRORS_PER_FILE`] and a count of the rest). One pass over the
/// text: a document is checked against the limits, then parsed once. None
/// when `keep_going` turned false between two documents.
pub(super) fn parse_file(
    path: &Path,
    text: &str,
    filter: &ManifestFilter,
    limits: &ManifestLimits,
    keep_going: &dyn Fn() -> bool,
) -> Option<Result<Vec<Doc>, Vec<ManifestError>>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let is_json = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let mut sink = Sink { path, filter, limits, docs: Vec::new(), errors: Vec::new(), more: 0 };
    let done =
        if is_json { json_documents(text, &mut sink, keep_going) } else { yaml_documents(text, &mut sink, keep_going) };
    done.then(|| sink.finish())
}

/// Where the documents of one file go.
struct Sink<'a> {
    path: &'a Path,
    filter: &'a ManifestFilter,
    limits: &'a ManifestLimits,
    docs: Vec<Doc>,
    errors: Vec<ManifestError>,
    /// Errors beyond MAX_ERRORS_PER_FILE, counted.
    more: usize,
}

impl Sink<'_> {
    fn error(&mut self, e: ManifestError) {
        if self.errors.len() < MAX_ERRORS_PER_FILE {
            self.errors.push(e);
        } else {
            self.more += 1;
        }
    }

    fn doc_error(&mut self, line: usize, message: String) {
        self.error(ManifestError::Document { path: self.path.to_path_buf(), line, message });
    }

    /// A parsed document whose content starts at `line`.
    fn document(&mut self, line: usize, value: Value) {
        // Exact, for what the pass before parsing cannot see (a sequence
        // at its key's indentation, a one-pair mapping in a flow sequence).
        if too_deep(&value, self.limits.max_depth) {
            let limit = self.limits.max_depth;
            self.error(ManifestError::TooDeep { path: self.path.to_path_buf(), line, column: None, limit });
            return;
        }
        manifests_of(self, line, value);
    }

    fn finish(mut self) -> Result<Vec<Doc>, Vec<ManifestError>> {
        if self.more > 0 {
            let (path, count) = (self.path.to_path_buf(), self.more);
            self.errors.push(ManifestError::More { path, count, what: "errors" });
        }
        if self.errors.is_empty() { Ok(self.docs) } else { Err(self.errors) }
    }
}

/// Whether arrays and objects nest deeper than `limit` in `value`.
fn too_deep(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::Array(_) | Value::Object(_) if depth > limit => return true,
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, depth + 1))),
            Value::Object(m) => stack.extend(m.values().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    false
}

/// Removes the " at line L column C" libyaml and serde_json add to messages.
fn strip_location(message: String, line: usize, column: usize) -> String {
    message.replacen(&format!(" at line {line} column {column}"), "", 1)
}

/// Adds `shift` to every "at line N" of a message about a document parsed
/// on its own, so that its lines are the file's.
pub(super) fn shift_lines(message: &str, shift: usize) -> String {
    const AT: &str = " at line ";
    let mut out = String::with_capacity(message.len() + 8);
    let mut rest = message;
    while let Some(i) = rest.find(AT) {
        let (head, tail) = rest.split_at(i + AT.len());
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        match tail[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + shift).to_string()),
            Err(_) => out.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// Line numbers of increasing byte offsets, counted once.
struct Lines<'a> {
    text: &'a [u8],
    offset: usize,
    line: usize,
}

impl Lines<'_> {
    /// The 1-based line of `offset`, which is not before the last one asked.
    fn at(&mut self, offset: usize) -> usize {
        self.line += self.text[self.offset..offset].iter().filter(|b| **b == b'\n').count();
        self.offset = offset;
        self.line
    }
}

/// The documents of a JSON file (one or more concatenated values), each
/// with the line where it starts. False when `keep_going` turned false.
fn json_documents(text: &str, sink: &mut Sink<'_>, keep_going: &dyn Fn() -> bool) -> bool {
    if let Err(e) = json_check(sink.path, text, sink.limits) {
        sink.error(e);
        return true;
    }
    let mut lines = Lines { text: text.as_bytes(), offset: 0, line: 1 };
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    loop {
        if !keep_going() {
            return false;
        }
        let offset = stream.byte_offset();
        match stream.next() {
            None => return true,
            Some(Ok(v)) => {
                let rest = &text[offset..];
                let start = offset + (rest.len() - rest.trim_start().len());
                sink.document(lines.at(start), v);
            }
            Some(Err(e)) => {
                let message = strip_location(e.to_string(), e.line(), e.column());
                let (path, line, column) = (sink.path.to_path_buf(), e.line(), e.column());
                sink.error(ManifestError::Syntax { path, line, column, message });
                return true;
            }
        }
    }
}

/// One pass over JSON text before it is parsed: the first value nested
/// deeper than the limit, or larger than the limit for one document.
fn json_check(path: &Path, text: &str, limits: &ManifestLimits) -> Result<(), ManifestError> {
    let (mut depth, mut in_string, mut escaped) = (0, false, false);
    let (mut line, mut line_start) = (1, 0);
    let (mut start, mut start_line) = (0, 1);
    let too_large = |size: usize, line: usize| ManifestError::DocumentTooLarge {
        path: path.to_path_buf(),
        line,
        size,
        limit: limits.max_document_bytes,
    };
    for (i, &c) in text.as_bytes().iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'\n' => (line, line_start) = (line + 1, i + 1),
            b'[' | b'{' => {
                if depth == 0 {
                    (start, start_line) = (i, line);
                }
                depth += 1;
                if depth > limits.max_depth {
                    let column = Some(text[line_start..i].chars().count() + 1);
                    return Err(ManifestError::TooDeep {
                        path: path.to_path_buf(),
                        line,
                        column,
                        limit: limits.max_depth,
                    });
                }
            }
            b']' | b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0 && i + 1 - start > limits.max_document_bytes {
                    return Err(too_large(i + 1 - start, start_line));
                }
            }
            _ => {}
        }
    }
    if depth > 0 && text.len() - start > limits.max_document_bytes {
        return Err(too_large(text.len() - start, start_line));
    }
    Ok(())
}

/// A line that is `---` or `...` followed by nothing or whitespace.
fn marker(line: &str, m: &str) -> bool {
    line.strip_prefix(m).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Splits YAML text at document markers. Per YAML, `---`/`...` at the
/// start of a line cannot be content, so this agrees with the parser.
/// Yields (0-based first line, byte range) per chunk.
fn yaml_chunks(text: &str) -> Vec<(usize, std::ops::Range<usize>)> {
    let mut chunks = Vec::new();
    let (mut start, mut start_line) = (0, 0);
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let end = offset + line.len();
        if marker(line, "---") {
            if offset > start {
                chunks.push((start_line, start..offset));
            }
            (start, start_line) = (offset, i);
        } else if marker(line, "...") {
            chunks.push((start_line, start..end));
            (start, start_line) = (end, i + 1);
        }
        offset = end;
    }
    if text.len() > start {
        chunks.push((start_line, start..text.len()));
    }
    chunks
}

/// The 1-based line of the first content of a chunk (skipping blank
/// lines, comments, directives and bare markers), if it has any.
fn first_content_line(chunk: &str, first_line: usize) -> Option<usize> {
    for (i, line) in chunk.lines().enumerate() {
        let content = if marker(line, "---") {
            &line[3..]
        } else if marker(line, "...") || line.starts_with('%') {
            continue;
        } else {
            line
        };
        let content = content.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        return Some(first_line + i + 1);
    }
    None
}

/// The documents of a YAML file, each with the line where its content
/// starts. Each is checked against the size and depth limits, then parsed
/// on its own, once, and its errors moved to the file's lines. False when
/// `keep_going` turned false.
fn yaml_documents(text: &str, sink: &mut Sink<'_>, keep_going: &dyn Fn() -> bool) -> bool {
    let limits = *sink.limits;
    for (first_line, range) in yaml_chunks(text) {
        if !keep_going() {
            return false;
        }
        let chunk = &text[range];
        let Some(line) = first_content_line(chunk, first_line) else { continue };
        let path = sink.path.to_path_buf();
        if chunk.len() > limits.max_document_bytes {
            let (size, limit) = (chunk.len(), limits.max_document_bytes);
            sink.error(ManifestError::DocumentTooLarge { path, line, size, limit });
            continue;
        }
        if let Some((l, c)) = yaml_too_deep(chunk, limits.max_depth) {
            let (line, column, limit) = (first_line + l + 1, Some(c + 1), limits.max_depth);
            sink.error(ManifestError::TooDeep { path, line, column, limit });
            continue;
        }
        let mut yaml: serde_yaml::Value = match serde_yaml::from_str(chunk) {
            Ok(v) => v,
            Err(e) => {
                sink.error(yaml_error(path, &e, first_line, line, limits.max_depth));
                continue;
            }
        };
        if let Err(e) = yaml.apply_merge() {
            sink.doc_error(line, format!("merge key (<<): {e}"));
            continue;
        }
        match serde_json::to_value(&yaml) {
            Ok(v) => sink.document(line, v),
            Err(e) => sink.doc_error(line, format!("not representable as JSON: {e}")),
        }
    }
    true
}

/// An error of serde_yaml about a document parsed on its own, which starts
/// on the file's line `shift` + 1 and whose content starts on `line`.
fn yaml_error(path: PathBuf, e: &serde_yaml::Error, shift: usize, line: usize, limit: usize) -> ManifestError {
    let message = e.to_string();
    match e.location() {
        // serde_yaml's own limit (128), past levels the check before
        // parsing does not count.
        Some(loc) if message.starts_with("recursion limit exceeded") => {
            ManifestError::TooDeep { path, line: loc.line() + shift, column: Some(loc.column()), limit }
        }
        Some(loc) => ManifestError::Syntax {
            path,
            line: loc.line() + shift,
            column: loc.column(),
            message: shift_lines(&strip_location(message, loc.line(), loc.column()), shift),
        },
        None => ManifestError::Document { path, line, message },
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Validates one document (expanding Lists) and keeps the selected ones.
fn manifests_of(sink: &mut Sink<'_>, line: usize, value: Value) {
    let mut obj = match value {
        Value::Null => return,
        Value::Object(m) => m,
        other => {
            sink.doc_error(line, format!("a manifest must be a mapping, found {}", type_name(&other)));
            return;
        }
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let is_list = kind == "List" || (kind.ends_with("List") && obj.get("items").is_some_and(Value::is_array));
    if is_list {
        let items = match obj.remove("items") {
            Some(Value::Array(items)) => items,
            None | Some(Value::Null) => Vec::new(),
            Some(other) => {
                sink.doc_error(line, format!("items of a {kind} must be a list, found {}", type_name(&other)));
                return;
            }
        };
        // Items of a typed list (`ConfigMapList`) may omit apiVersion and kind.
        let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
        let list_api_version = obj.get("apiVersion").cloned();
        for (i, item) in items.into_iter().enumerate() {
            let mut item = match item {
                Value::Object(m) => m,
                other => {
                    sink.doc_error(line, format!("items[{i}] must be a mapping, found {}", type_name(&other)));
                    continue;
                }
            };
            if let Some(k) = item_kind {
                item.entry("kind").or_insert_with(|| Value::String(k.to_string()));
                if let Some(av) = &list_api_version {
                    item.entry("apiVersion").or_insert_with(|| av.clone());
                }
            }
            match validate(&item) {
                Ok(key) => select(key, line, Value::Object(item), sink.filter, &mut sink.docs),
                Err(m) => sink.doc_error(line, format!("items[{i}] of the {kind}: {m}")),
            }
        }
        return;
    }
    match validate(&obj) {
        Ok(key) => select(key, line, Value::Object(obj), sink.filter, &mut sink.docs),
        Err(m) => sink.doc_error(line, m),
    }
}

fn select(key: String, line: usize, value: Value, filter: &ManifestFilter, docs: &mut Vec<Doc>) {
    if filter.matches(&value) {
        docs.push(Doc { key, line, value: Arc::new(value) });
    }
}

/// Checks what the engine relies on; returns the key.
fn validate(obj: &Map<String, Value>) -> Result<String, String> {
    for field in ["apiVersion", "kind"] {
        match obj.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            None | Some(Value::Null) => return Err(format!("manifest has no {field}")),
            Some(Value::String(_)) => return Err(format!("{field} is empty")),
            Some(other) => return Err(format!("{field} must be a string, found {}", type_name(other))),
        }
    }
    let meta = match obj.get("metadata") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => return Err("manifest has no metadata.name".into()),
        Some(other) => return Err(format!("metadata must be a mapping, found {}", type_name(other))),
    };
    let name = match meta.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s,
        None | Some(Value::Null) | Some(Value::String(_)) => return Err("manifest has no metadata.name".into()),
        Some(other) => return Err(format!("metadata.name must be a string, found {}", type_name(other))),
    };
    for field in ["namespace", "uid", "resourceVersion"] {
        match meta.get(field) {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(other) => return Err(format!("metadata.{field} must be a string, found {}", type_name(other))),
        }
    }
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!("metadata.{field}.{k} must be a string, found {}", type_name(v)));
                }
            }
            Some(other) => return Err(format!("metadata.{field} must be a mapping, found {}", type_name(other))),
        }
    }
    Ok(match meta.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.clone(),
    })
}
