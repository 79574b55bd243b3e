use serde_json::json;

use super::answers::{error_of, still_there};
use super::paths::path_segment;
use super::request::delete_options;
use super::*;
use crate::cluster::{Cause, DeleteOptions, Propagation};

#[test]
fn a_status_body_is_typed_with_its_causes() {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid",
        "message": "ConfigMap \"A\" is invalid",
        "details": {"name": "A", "kind": "ConfigMap", "causes": [
            {"reason": "FieldValueInvalid", "message": "Invalid value: \"A\"", "field": "metadata.name"}
        ]}
    });
    let (error, names) = error_of(StatusCode::UNPROCESSABLE_ENTITY, None, body.to_string().as_bytes());
    assert!(names);
    assert_eq!(
        error,
        WriteError::Invalid {
            message: "ConfigMap \"A\" is invalid".into(),
            causes: vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"A\"".into(),
                field: "metadata.name".into()
            }],
        }
    );
}

#[test]
fn a_plain_text_429_keeps_its_retry_after() {
    let (error, _) = error_of(StatusCode::TOO_MANY_REQUESTS, Some(7), b"Too many requests, please try again later.\n");
    assert_eq!(
        error,
        WriteError::RateLimited {
            message: "Too many requests, please try again later.".into(),
            retry_after_seconds: Some(7)
        }
    );
    let status = json!({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down",
        "details": {"retryAfterSeconds": 3}});
    let (error, _) = error_of(StatusCode::TOO_MANY_REQUESTS, None, status.to_string().as_bytes());
    assert_eq!(error, WriteError::RateLimited { message: "slow down".into(), retry_after_seconds: Some(3) });
}

#[test]
fn a_delete_answers_the_object_only_while_it_is_still_there() {
    assert_eq!(still_there(json!({"kind": "Status", "status": "Success"})), None);
    assert_eq!(still_there(json!({"kind": "Widget", "metadata": {"name": "w"}})), None);
    let marked = json!({"kind": "Widget", "metadata": {"name": "w", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    assert_eq!(still_there(marked.clone()), Some(marked));
}

#[test]
fn path_segments_cannot_escape_their_place() {
    assert!(path_segment("a/b").is_err());
    assert!(path_segment("..").is_err());
    assert!(path_segment("a%2Fb").is_err());
    assert_eq!(path_segment("a b?").unwrap(), "a%20b%3F");
    assert_eq!(path_segment("web-1.example").unwrap(), "web-1.example");
}

#[test]
fn delete_options_carry_preconditions_propagation_and_dry_run() {
    let options = DeleteOptions {
        uid: Some("u".into()),
        resource_version: Some("7".into()),
        propagation: Some(Propagation::Foreground),
    };
    assert_eq!(
        delete_options(&options, true),
        json!({"kind": "DeleteOptions", "apiVersion": "v1",
            "preconditions": {"uid": "u", "resourceVersion": "7"},
            "propagationPolicy": "Foreground", "dryRun": ["All"]})
    );
    assert_eq!(delete_options(&DeleteOptions::default(), false), json!({"kind": "DeleteOptions", "apiVersion": "v1"}));
}
