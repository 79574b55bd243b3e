//! Lists: paged (`continue` tokens, one unpaged list again when a token
//! expires), items kept as the JSON text received, with `kind` and
//! `apiVersion` spliced in where the server left them out.

use std::sync::Arc;

use ::kube::api::{ListParams, VersionMatch};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{KubeSource, ListSemantic, Meta};
use crate::informer::{ListResult, Object, ObjectRef, SourceError};

impl KubeSource {
    fn list_params(&self) -> ListParams {
        let (resource_version, version_match) = match self.options.list_semantic {
            ListSemantic::Any => (Some("0".into()), Some(VersionMatch::NotOlderThan)),
            ListSemantic::MostRecent => (None, None),
        };
        ListParams {
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            limit: self.options.page_size,
            resource_version,
            version_match,
            ..Default::default()
        }
    }

    pub(super) async fn list_all(&self) -> Result<ListResult, SourceError> {
        let resolved = self.resolve().await?;
        let (request, meta) = (&resolved.request, &resolved.meta);
        let mut lp = self.list_params();
        let mut items = Vec::new();
        loop {
            let req = request.list(&lp).map_err(|e| meta.other("list", e))?;
            let text = match self.client.request_text(req).await {
                Ok(text) => text,
                Err(::kube::Error::Api(s)) if s.code == 410 && lp.continue_token.is_some() => {
                    tracing::info!(source = %meta.describe, "list continue token expired ({}); listing again without paging", s.message);
                    items.clear();
                    lp.continue_token = None;
                    lp.limit = None;
                    continue;
                }
                Err(e) => return Err(meta.error("list", "", e)),
            };
            let page: RawList = serde_json::from_str(&text).map_err(|e| meta.other("list: undecodable response", e))?;
            let page_items = page.items.unwrap_or_default();
            items.reserve(page_items.len());
            for raw in page_items {
                items.push(meta.object(raw)?);
            }
            match page.metadata.continue_token.filter(|c| !c.is_empty()) {
                Some(token) => lp.continue_token = Some(token),
                None => {
                    let resource_version =
                        page.metadata.resource_version.filter(|rv| !rv.is_empty()).ok_or_else(|| {
                            SourceError::Other(format!("list {}: response has no resourceVersion", meta.describe))
                        })?;
                    return Ok(ListResult { items, resource_version });
                }
            }
        }
    }
}

impl Meta {
    /// Keeps the JSON as received; adds `kind`/`apiVersion` when missing.
    pub(super) fn object(&self, raw: Box<RawValue>) -> Result<ObjectRef, SourceError> {
        let undecodable =
            |e: crate::informer::ObjectError| SourceError::Other(format!("{}: undecodable object: {e}", self.describe));
        let obj = Object::from_raw(raw).map_err(undecodable)?;
        if !obj.kind().is_empty() && !obj.api_version().is_empty() {
            return Ok(Arc::new(obj));
        }
        let json = with_type_meta(
            obj.json(),
            obj.api_version().is_empty().then_some(self.api_version.as_str()),
            obj.kind().is_empty().then_some(self.kind.as_str()),
        );
        Ok(Arc::new(Object::from_json(json).map_err(undecodable)?))
    }
}

/// Splices `apiVersion` and/or `kind` into the JSON object text `json`.
pub(super) fn with_type_meta(json: &str, api_version: Option<&str>, kind: Option<&str>) -> String {
    let Some(rest) = json.trim_start().strip_prefix('{') else { return json.to_string() };
    let mut out = String::with_capacity(json.len() + 48);
    out.push('{');
    let fields = [("apiVersion", api_version), ("kind", kind)];
    let mut first = true;
    for (name, value) in fields.iter().filter_map(|(n, v)| v.map(|v| (n, v))) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&format!("\"{name}\":"));
        out.push_str(&serde_json::Value::from(value).to_string());
    }
    if !first && !rest.trim_start().starts_with('}') {
        out.push(',');
    }
    out.push_str(rest);
    out
}

#[derive(Deserialize)]
struct RawList {
    #[serde(default)]
    metadata: RawListMeta,
    #[serde(default)]
    items: Option<Vec<Box<RawValue>>>,
}

#[derive(Deserialize, Default)]
struct RawListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}
