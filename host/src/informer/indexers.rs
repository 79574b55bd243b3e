//! The index functions an informer's cache can be configured with: by the
//! value of a label, and by the string values JSONPath queries select in the
//! object (controller-runtime's `IndexField`, with RFC 9535 JSONPath as the
//! field's extractor).
//!
//! This module only turns a configuration into [`IndexFunc`]s; the cache
//! keeps the indices ([`crate::informer::Indexer`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json_path::JsonPath;

use super::{IndexFunc, ObjectRef};

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
/// Each call parses the object's JSON: a field index costs a parse per
/// object added and two per update (the old version's values are removed).
pub fn field_index(paths: Vec<JsonPath>) -> IndexFunc {
    Arc::new(move |o: &ObjectRef| {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(o.json()) else { return Vec::new() };
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

/// The index functions of named field indexers (each name's JSONPath
/// queries), as config files and `Plugin` resources give them; the first
/// query that does not parse is an error naming its indexer.
pub fn field_indexers(indexers: &BTreeMap<String, Vec<String>>) -> Result<HashMap<String, IndexFunc>, String> {
    indexers
        .iter()
        .map(|(name, queries)| {
            let paths = queries
                .iter()
                .map(|q| {
                    parse_field_path(q).map_err(|e| format!("field indexer {name:?}: invalid JSONPath {q:?}: {e}"))
                })
                .collect::<Result<_, _>>()?;
            Ok((name.clone(), field_index(paths)))
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

    #[test]
    fn a_bad_query_is_refused_with_the_reason() {
        let e = parse_field_path("spec.volumes").unwrap_err();
        assert!(!e.is_empty(), "{e}");
        assert!(parse_field_path("$.spec.volumes[").is_err());
    }
}
