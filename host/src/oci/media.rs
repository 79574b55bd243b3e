//! Which artifacts are components: the media types a manifest, its config
//! and its one layer may have, and the check of a manifest against them.

use oci_client::manifest::{OciDescriptor, OciImageManifest};

use super::OciError;

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker schema 2 manifest (what some tools still push).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The manifest media types a pull asks for (and accepts).
pub const MANIFEST_MEDIA_TYPES: &[&str] = &[OCI_MANIFEST, DOCKER_MANIFEST];

/// The config of a wasm artifact (CNCF TAG Runtime wasm OCI artifact layout).
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The one layer of a wasm artifact: the component's bytes.
pub const WASM_LAYER: &str = "application/wasm";

/// Config media types accepted: the wasm config, the OCI empty descriptor
/// and `oras push`'s default (plain artifacts), and the pre-spec
/// `wasm-to-oci` config.
pub const CONFIG_MEDIA_TYPES: &[&str] = &[
    WASM_CONFIG,
    "application/vnd.oci.empty.v1+json",
    "application/vnd.unknown.config.v1+json",
    "application/vnd.wasm.config.v1+json",
];

/// Layer media types accepted: `application/wasm`, the pre-spec
/// `wasm-to-oci` layer, and `oras push`'s default for a file given without
/// a type (the bytes are the file, not a tar).
pub const LAYER_MEDIA_TYPES: &[&str] =
    &[WASM_LAYER, "application/vnd.wasm.content.layer.v1+wasm", "application/vnd.oci.image.layer.v1.tar"];

/// The component layer of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// `sha256:<hex>`.
    pub digest: String,
    /// Declared size in bytes.
    pub size: u64,
    pub media_type: String,
}

impl Layer {
    /// The descriptor to fetch it by, without the manifest's `urls`: a
    /// manifest must not make the host fetch from places other than the
    /// registry it named.
    pub fn descriptor(&self) -> OciDescriptor {
        OciDescriptor {
            media_type: self.media_type.clone(),
            digest: self.digest.clone(),
            size: self.size as i64,
            ..Default::default()
        }
    }
}

/// Checks that the manifest `body` describes a component (see the
/// constants above) and returns its layer.
pub fn component_layer(reference: &str, body: &[u8]) -> Result<Layer, OciError> {
    let wrong =
        |found: String, expected: String| OciError::WrongMediaType { reference: reference.to_owned(), found, expected };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| OciError::Registry {
        reference: reference.to_owned(),
        message: format!("manifest is not JSON: {e}"),
    })?;
    if let Some(media_type) = value.get("mediaType").and_then(|m| m.as_str())
        && !MANIFEST_MEDIA_TYPES.contains(&media_type)
    {
        return Err(wrong(
            format!("manifest {media_type}"),
            format!("an image manifest ({})", MANIFEST_MEDIA_TYPES.join(" or ")),
        ));
    }
    let manifest: OciImageManifest = serde_json::from_value(value).map_err(|e| OciError::Registry {
        reference: reference.to_owned(),
        message: format!("manifest does not parse: {e}"),
    })?;
    if !CONFIG_MEDIA_TYPES.contains(&manifest.config.media_type.as_str()) {
        return Err(wrong(
            format!("config {}", manifest.config.media_type),
            format!("config {}", CONFIG_MEDIA_TYPES.join(" or ")),
        ));
    }
    let [layer] = manifest.layers.as_slice() else {
        let types: Vec<&str> = manifest.layers.iter().map(|l| l.media_type.as_str()).collect();
        return Err(wrong(
            format!("{} layers [{}]", types.len(), types.join(", ")),
            format!("exactly one layer of {}", LAYER_MEDIA_TYPES.join(" or ")),
        ));
    };
    if !LAYER_MEDIA_TYPES.contains(&layer.media_type.as_str()) {
        return Err(wrong(format!("layer {}", layer.media_type), format!("layer {}", LAYER_MEDIA_TYPES.join(" or "))));
    }
    if super::cache::sha256_hex(&layer.digest).is_none() || layer.size < 0 {
        return Err(OciError::Registry {
            reference: reference.to_owned(),
            message: format!(
                "layer descriptor {} (size {}) is not a sha256 digest with a size",
                layer.digest, layer.size
            ),
        });
    }
    Ok(Layer { digest: layer.digest.clone(), size: layer.size as u64, media_type: layer.media_type.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(media_type: &str, config: &str, layers: &[&str]) -> Vec<u8> {
        let digest = super::super::cache::sha256_digest(b"x");
        let layers: Vec<_> =
            layers.iter().map(|t| serde_json::json!({"mediaType": t, "digest": digest, "size": 1})).collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": config, "digest": digest, "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn wasm_artifacts_and_plain_single_layer_artifacts_are_components() {
        for (config, layer) in [
            (WASM_CONFIG, WASM_LAYER),
            ("application/vnd.oci.empty.v1+json", WASM_LAYER),
            ("application/vnd.unknown.config.v1+json", "application/vnd.oci.image.layer.v1.tar"),
        ] {
            let layer = component_layer("r", &manifest(OCI_MANIFEST, config, &[layer])).unwrap();
            assert_eq!(layer.size, 1);
        }
    }

    #[test]
    fn anything_else_is_a_wrong_media_type_saying_what_was_found() {
        let image_config = "application/vnd.oci.image.config.v1+json";
        let gzip = "application/vnd.oci.image.layer.v1.tar+gzip";
        for (body, found) in [
            (manifest(OCI_MANIFEST, image_config, &[WASM_LAYER]), image_config),
            (manifest(OCI_MANIFEST, WASM_CONFIG, &[gzip]), gzip),
            (manifest(OCI_MANIFEST, WASM_CONFIG, &[WASM_LAYER, WASM_LAYER]), "2 layers"),
            (manifest(OCI_MANIFEST, WASM_CONFIG, &[]), "0 layers"),
            (manifest("application/vnd.oci.image.index.v1+json", WASM_CONFIG, &[WASM_LAYER]), "index"),
        ] {
            let error = component_layer("reg/x:1", &body).unwrap_err();
            assert!(matches!(&error, OciError::WrongMediaType { found: f, .. } if f.contains(found)), "{error}");
            assert!(error.to_string().starts_with("reg/x:1: wrong media type"), "{error}");
        }
    }
}
