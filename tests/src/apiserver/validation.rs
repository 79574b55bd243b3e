//! Validation the API server does before storing: object names
//! (`ValidateObjectMeta` with `NameIsDNSSubdomain`, or `NameIsDNSLabel` for
//! Namespaces), request options (`dryRun`, `fieldManager`, `force`,
//! `propagationPolicy`), and the required fields of `events.k8s.io/v1`
//! Events. Failures are `422 Invalid` with one cause per field, worded as
//! `k8s.io/apimachinery/pkg/util/validation` words them.

use super::*;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// `IsDNS1123Subdomain`: the error details, none when valid.
pub(super) fn dns_subdomain_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !name.split('.').all(is_label) {
        errs.push(SUBDOMAIN_MSG.to_string());
    }
    errs
}

/// `IsDNS1123Label`.
pub(super) fn dns_label_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label(name) {
        errs.push(LABEL_MSG.to_string());
    }
    errs
}

/// The field errors of an object about to be stored.
pub(super) fn validate_object(ty: &ResourceType, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if name.is_empty() {
        causes.push(Cause::required("metadata.name", "name or generateName is required"));
    } else {
        let errs = if ty.kind == "Namespace" && ty.group.is_empty() {
            dns_label_errors(name)
        } else {
            dns_subdomain_errors(name)
        };
        causes.extend(errs.iter().map(|e| Cause::invalid("metadata.name", &format!("{name:?}"), e)));
    }
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if !v.is_string() {
                causes.push(Cause::invalid(&format!("metadata.labels.{k}"), &v.to_string(), "must be a string"));
            }
        }
    }
    if ty.group == "events.k8s.io" && ty.kind == "Event" {
        // ValidateEventCreate for events.k8s.io/v1 (v1 events carry these).
        for field in ["eventTime", "reportingController", "reportingInstance", "action", "reason"] {
            if obj[field].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required(field, ""));
            }
        }
        let ty_value = obj["type"].as_str().unwrap_or("");
        if ty_value != "Normal" && ty_value != "Warning" {
            causes.push(Cause::invalid("type", "\"\"", &format!("has invalid value: {ty_value}")));
        }
        if obj["note"].as_str().is_some_and(|n| n.len() > 1024) {
            causes.push(Cause::invalid("note", "\"\"", "can have at most 1024 characters"));
        }
    }
    causes
}

/// `ValidateDryRun`: every value must be `All`. Returns whether it is a dry run.
pub(super) fn dry_run(values: &[String], options_kind: &str) -> ApiResult<bool> {
    if values.iter().any(|v| v != "All") {
        let rendered: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        return Err(ApiError::invalid_options(
            options_kind,
            vec![Cause::not_supported("dryRun", &format!("[]string{{{}}}", rendered.join(", ")), &["All"])],
        ));
    }
    Ok(!values.is_empty())
}

/// `ValidateFieldManager`: at most 128 printable characters.
pub(super) fn field_manager(manager: &str, options_kind: &str) -> ApiResult<()> {
    if manager.len() > 128 {
        return Err(ApiError::invalid_options(
            options_kind,
            vec![Cause {
                reason: "FieldValueTooLong",
                message: "Too long: may not be more than 128 bytes".into(),
                field: "fieldManager".into(),
            }],
        ));
    }
    if manager.chars().any(|c| c.is_control()) {
        return Err(ApiError::invalid_options(
            options_kind,
            vec![Cause::invalid("fieldManager", &format!("{manager:?}"), "must only contain printable characters")],
        ));
    }
    Ok(())
}
