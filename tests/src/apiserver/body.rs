//! What the body of a `POST`, a `PUT` or an apply must be: decoded by its
//! content type, of the resource's kind and `apiVersion`, and named and
//! namespaced as its URL says (the checks of the generic registry's create
//! and update handlers, with their error texts).

use super::writes::WriteRequest;
use super::*;

/// The body media types `POST` and `PUT` accept. Protobuf, which the real
/// server also takes for built-in types, is not spoken here: such a body gets
/// the `415` a server answers for a media type it does not serve.
const BODY_TYPES: [&str; 2] = ["application/json", "application/yaml"];

/// Decodes a `POST`/`PUT` body by its content type (JSON when none is given).
pub(super) fn decode_body(ty: &ResourceType, req: &WriteRequest<'_>) -> ApiResult<Value> {
    match req.content_type {
        "" | "application/json" => decode(ty, req.body, false),
        "application/yaml" => decode(ty, req.body, true),
        _ => Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                BODY_TYPES.join(", ")
            ),
        )),
    }
}

/// Decodes a request body as an object of `ty`.
pub(super) fn decode(ty: &ResourceType, body: &[u8], yaml: bool) -> ApiResult<Value> {
    let obj: Value = if yaml {
        serde_yaml::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}")))?
    };
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: cannot unmarshal {} into Go value of type struct",
            if obj.is_array() { "array" } else { "value" }
        )));
    }
    let body_text = String::from_utf8_lossy(body);
    match obj["kind"].as_str() {
        None | Some("") => return Err(ApiError::bad_request(format!("Object 'Kind' is missing in '{body_text}'"))),
        Some(k) if k != ty.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                ty.kind
            )));
        }
        _ => {}
    }
    match obj["apiVersion"].as_str() {
        Some(v) if v == ty.api_version() => {}
        v => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                v.unwrap_or(""),
                ty.api_version()
            )));
        }
    }
    if !obj["metadata"].is_object() && !obj["metadata"].is_null() {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(obj)
}

/// Fixes the namespace of `obj` against the URL's (`checkName` and the
/// namespace defaulting of the create/update handlers).
pub(super) fn check_namespace(ty: &ResourceType, obj: &mut Value, url_ns: Option<&str>) -> ApiResult<()> {
    if obj["metadata"].is_null() {
        obj["metadata"] = json!({});
    }
    let meta = obj["metadata"].as_object_mut().expect("metadata");
    if ty.namespaced {
        let ns = url_ns.unwrap_or("");
        match meta.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("namespace".into(), json!(ns));
            }
            Some(x) if x != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
    } else {
        meta.remove("namespace");
    }
    Ok(())
}

pub(super) fn check_name(obj: &Value, url_name: &str) -> ApiResult<()> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if name != url_name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({url_name})"
        )));
    }
    Ok(())
}
