//! The plugin's configuration ([`Config`]), shared by handlers and controllers.

use serde::de::DeserializeOwned;

/// The plugin's configuration: JSON text from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    text: String,
}

impl Config {
    /// Wraps configuration text (the host's `init` argument).
    pub fn new(text: impl Into<String>) -> Self {
        Config { text: text.into() }
    }

    /// The raw JSON text, exactly as the host passed it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the host passed no configuration (empty or blank text).
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// Deserializes the configuration into the plugin's own type.
    ///
    /// Empty or blank text parses as `{}`, so a struct whose fields all have
    /// `#[serde(default)]` works without any configuration.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        let text = if self.is_empty() { "{}" } else { self.text.as_str() };
        serde_json::from_str(text).map_err(|e| format!("invalid plugin configuration: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(default)]
    struct Settings {
        name: String,
        required: Vec<String>,
    }

    #[test]
    fn config_parses_into_the_plugins_type() {
        let config = Config::new(r#"{"name": "x", "required": ["app", "team"]}"#);
        assert!(!config.is_empty());
        let settings: Settings = config.parse().unwrap();
        assert_eq!(settings, Settings { name: "x".into(), required: vec!["app".into(), "team".into()] });
    }

    #[test]
    fn blank_config_parses_as_an_empty_object() {
        for text in ["", "  \n"] {
            let config = Config::new(text);
            assert!(config.is_empty());
            assert_eq!(config.as_str(), text);
            assert_eq!(config.parse::<Settings>().unwrap(), Settings::default());
        }
    }

    #[test]
    fn bad_config_names_the_problem() {
        let err = Config::new(r#"{"name": 3}"#).parse::<Settings>().unwrap_err();
        assert!(err.starts_with("invalid plugin configuration:"), "{err}");
    }
}
