//! The index functions an informer's cache can be configured with: by the
//! value of a label, and by the string values JSONPath queries select in the
//! object (controller-runtime's `IndexField`, with RFC 9535 JSONPath as the
//! field's extractor).
//!
//! This module only turns a configuration into [`IndexFunc`]s; the cache
//! keeps the indices ([`crate::informer::Indexer`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde_json::Value;
use serde_json_path::JsonPath;

use super::{IndexFunc, Object, ObjectRef};

/// A label-key index: objects by the value of one label.
pub fn label_index(key: String) -> IndexFunc {
    Arc::new(move |o: &ObjectRef| o.label(&key).map(|v| vec![v.to_string()]).unwrap_or_default())
}

/// Parses one JSONPath query of a field indexer; the error says what is
/// wrong and where in the query.
pub fn parse_field_path(query: &str) -> Result<JsonPath, String> {
    JsonPath::parse(query).map_err(|e| e.to_string())
}

/// A field index: objects by every string the queries select in them.
///
/// A namespaced object's values are prefixed with its namespace
/// (`shop/web-config`), so that a reference by name indexes under the
/// referenced object's key and one lookup finds the referrers of one
/// object; a cluster-scoped object's values are as selected. Values that
/// are not strings (numbers, objects) are not indexed; each value counts
/// once per object.
///
/// An object is indexed under at most [`MAX_FIELD_INDEX_VALUES`] values per
/// index (the first in sorted order): every value is a copy in the index,
/// and a query such as `$..*` over an object a tenant writes must not make
/// the host hold many times the object.
///
/// A field index parses the JSON of each object version it reads: one
/// parse per object added and two per update (the old version's values are
/// removed). [`field_indexers`] builds indexes that share those parses.
pub fn field_index(paths: Vec<JsonPath>) -> IndexFunc {
    field_index_parsed_by(paths, Arc::default())
}

fn field_index_parsed_by(paths: Vec<JsonPath>, parsed: Arc<RecentlyParsed>) -> IndexFunc {
    Arc::new(move |o: &ObjectRef| {
        let Some(value) = parsed.get(o) else { return Vec::new() };
        let mut out: Vec<String> = paths
            .iter()
            .flat_map(|p| p.query(&value).all())
            .filter_map(|v| v.as_str())
            .map(|v| match o.namespace() {
                Some(ns) => format!("{ns}/{v}"),
                None => v.to_string(),
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out.truncate(MAX_FIELD_INDEX_VALUES);
        out
    })
}

/// The parsed JSON of the last two objects the field indexes of one cache
/// read, so that its indexes parse an object once between them: the cache
/// runs every index on the old and the new version of an object in turn
/// (old, new, old, new, ...), and two entries serve them all.
///
/// An entry is known by its object's allocation, held weakly: the
/// allocation cannot be reused while the entry holds it, so a new object
/// at the same address is never mistaken for an old one. Objects over
/// [`RecentlyParsed::MAX_KEPT`] bytes of JSON are parsed each time rather
/// than kept, so what this holds between changes stays small.
#[derive(Default)]
struct RecentlyParsed {
    /// The most recently read first.
    recent: Mutex<[Option<Parsed>; 2]>,
}

/// An object (its allocation, held weakly) and its JSON as a value.
type Parsed = (Weak<Object>, Arc<Value>);

impl RecentlyParsed {
    const MAX_KEPT: usize = 64 << 10;

    /// The object's JSON as a value; `None` when it is not JSON.
    fn get(&self, o: &ObjectRef) -> Option<Arc<Value>> {
        let parse = || serde_json::from_str::<Value>(o.json()).ok().map(Arc::new);
        if o.json().len() > Self::MAX_KEPT {
            return parse();
        }
        let mut recent = self.recent.lock();
        let seen = |entry: &Option<Parsed>| {
            entry.as_ref().is_some_and(|(seen, _)| std::ptr::eq(seen.as_ptr(), Arc::as_ptr(o)))
        };
        // A new one replaces the less recently read.
        if seen(&recent[1]) {
            recent.swap(0, 1);
        }
        if !seen(&recent[0]) {
            let value = parse()?;
            recent[1] = recent[0].take();
            recent[0] = Some((Arc::downgrade(o), value));
        }
        recent[0].as_ref().map(|(_, value)| value.clone())
    }
}

/// The index functions of named field indexers (each name's JSONPath
/// queries), as config files and `Plugin` resources give them, sharing one
/// parse of each object; the first query that does not parse is an error
/// naming its indexer.
pub fn field_indexers(indexers: &BTreeMap<String, Vec<String>>) -> Result<HashMap<String, IndexFunc>, String> {
    let parsed = Arc::<RecentlyParsed>::default();
    indexers
        .iter()
        .map(|(name, queries)| {
            let paths = queries
                .iter()
                .map(|q| {
                    parse_field_path(q).map_err(|e| format!("field indexer {name:?}: invalid JSONPath {q:?}: {e}"))
                })
                .collect::<Result<_, _>>()?;
            Ok((name.clone(), field_index_parsed_by(paths, parsed.clone())))
        })
        .collect()
}

/// The most values one object is indexed under by one field index.
pub const MAX_FIELD_INDEX_VALUES: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::Object;

    fn obj(json: serde_json::Value) -> ObjectRef {
        Arc::new(Object::from_value(&json).unwrap())
    }

    #[test]
    fn label_indexes() {
        let f = label_index("app".into());
        let o = obj(serde_json::json!({"metadata": {"name": "a", "labels": {"app": "web"}}}));
        assert_eq!(f(&o), ["web"]);
        assert!(f(&obj(serde_json::json!({"metadata": {"name": "b"}}))).is_empty());
    }

    #[test]
    fn a_field_index_keys_each_selected_string_by_the_objects_namespace_once() {
        let paths = [
            "$.spec.template.spec.volumes[*].configMap.name",
            "$.spec.template.spec['containers','initContainers'][*].envFrom[*].configMapRef.name",
        ];
        let f = field_index(paths.iter().map(|p| parse_field_path(p).unwrap()).collect());
        let d = obj(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {
                "volumes": [{"name": "a", "configMap": {"name": "web-config"}}, {"name": "b", "secret": {"secretName": "s"}}],
                "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "env"}}, {"configMapRef": {"name": "web-config"}}]}],
                "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init"}}]}],
            }}},
        }));
        assert_eq!(f(&d), ["shop/env", "shop/init", "shop/web-config"]);
        let none = obj(serde_json::json!({"metadata": {"name": "x", "namespace": "shop"}, "spec": {}}));
        assert!(f(&none).is_empty());
    }

    #[test]
    fn a_cluster_scoped_objects_values_are_as_selected_and_non_strings_are_skipped() {
        let f = field_index(vec![parse_field_path("$.spec.ids[*]").unwrap()]);
        let o = obj(serde_json::json!({"metadata": {"name": "n"}, "spec": {"ids": ["a", 7, {"x": 1}, "b"]}}));
        assert_eq!(f(&o), ["a", "b"]);
    }

    #[test]
    fn an_object_is_indexed_under_a_bounded_number_of_values() {
        let f = field_index(vec![parse_field_path("$..*").unwrap()]);
        let data: serde_json::Map<String, serde_json::Value> =
            (0..1000).map(|i| (format!("k{i:04}"), serde_json::json!(format!("v{i:04}")))).collect();
        let o = obj(serde_json::json!({"metadata": {"name": "big", "namespace": "t"}, "data": data}));
        let values = f(&o);
        assert_eq!(values.len(), MAX_FIELD_INDEX_VALUES);
        assert_eq!(values[0], "t/big", "the first in sorted order");
    }

    /// The field indexes of one cache parse each object once between them,
    /// the old and the new version of an update alike, and still give each
    /// index its own values.
    #[test]
    fn field_indexers_share_one_parse_per_object() {
        let parsed = Arc::<RecentlyParsed>::default();
        let queries = |q: &str| vec![parse_field_path(q).unwrap()];
        let a = field_index_parsed_by(queries("$.spec.a"), parsed.clone());
        let b = field_index_parsed_by(queries("$.spec.b"), parsed.clone());
        let version = |a: &str, b: &str| {
            obj(serde_json::json!({"metadata": {"name": "n", "namespace": "t"}, "spec": {"a": a, "b": b}}))
        };
        let (old, new) = (version("a1", "b1"), version("a2", "b2"));
        let value_of = |o: &ObjectRef| parsed.get(o).unwrap();
        // As the cache runs them on an update: each index on old, then new.
        assert_eq!((a(&old), a(&new)), (vec!["t/a1".to_string()], vec!["t/a2".to_string()]));
        let (old_value, new_value) = (value_of(&old), value_of(&new));
        assert_eq!((b(&old), b(&new)), (vec!["t/b1".to_string()], vec!["t/b2".to_string()]));
        assert!(Arc::ptr_eq(&old_value, &value_of(&old)), "the old version was parsed once");
        assert!(Arc::ptr_eq(&new_value, &value_of(&new)), "the new version was parsed once");
        // A third version pushes out the least recently read.
        let next = version("a3", "b3");
        assert_eq!(b(&next), ["t/b3"]);
        assert!(Arc::ptr_eq(&new_value, &value_of(&new)));
        assert!(!Arc::ptr_eq(&old_value, &value_of(&old)), "the oldest is parsed again");
        // An object too large to keep is parsed every time, and indexed alike.
        let big = version(&"x".repeat(RecentlyParsed::MAX_KEPT), "big");
        assert_eq!(b(&big), ["t/big"]);
        assert!(!Arc::ptr_eq(&value_of(&big), &value_of(&big)));
    }

    #[test]
    fn a_bad_query_is_refused_with_the_reason() {
        let e = parse_field_path("spec.volumes").unwrap_err();
        assert!(!e.is_empty(), "{e}");
        assert!(parse_field_path("$.spec.volumes[").is_err());
    }
}
