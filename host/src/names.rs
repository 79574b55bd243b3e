//! Names of plugins, informers and tenants, and namespaces: Kubernetes-style
//! DNS labels (RFC 1123).
//!
//! This module owns the one check every name goes through where it enters the
//! host: the TOML config ([`crate::config`]), the registry
//! ([`crate::registry::PluginRegistry::load`]) and the admin API
//! ([`crate::admin_api`]). A valid name is 1 to 63 characters, only lowercase
//! ASCII letters, digits and `-`, starting and ending with a letter or digit
//! (what Kubernetes accepts as a namespace or a Service name). Such a name
//! can appear as is in a log line, a metric label or a URL path: it holds no
//! quote, backslash, newline or other control character that could forge a
//! log line or a metric series.
//!
//! ```
//! use informer_host::names;
//! assert!(names::check("plugin", "label-audit").is_ok());
//! let e = names::check("plugin", "x\"} 1\nforged 1").unwrap_err();
//! assert_eq!(
//!     e.to_string(),
//!     r#"plugin name "x\"} 1\nforged 1" may contain only lowercase letters, digits and '-'"#
//! );
//! ```

/// The longest valid name.
pub const MAX_LEN: usize = 63;

/// How much of an invalid name an error message quotes.
const QUOTED_LEN: usize = 80;

/// A name that is not a DNS label. The message quotes the name escaped (and
/// shortened when long), so it is safe to log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} name {name:?}{ellipsis} {why}", ellipsis = if *.truncated { "…" } else { "" })]
pub struct InvalidName {
    /// What was named: `plugin`, `informer`, `tenant`, `namespace`.
    pub what: &'static str,
    /// The name (its first characters when it was long).
    pub name: String,
    /// Whether `name` was shortened.
    pub truncated: bool,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Why `name` is not a DNS label (RFC 1123), if it is not.
pub fn dns_label_problem(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("must not be empty");
    }
    if name.len() > MAX_LEN {
        return Err("is longer than 63 characters");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err("may contain only lowercase letters, digits and '-'");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// Checks that `name`, the name of a `what` (`plugin`, `informer`, ...), is a
/// DNS label.
pub fn check(what: &'static str, name: &str) -> Result<(), InvalidName> {
    dns_label_problem(name).map_err(|why| {
        let truncated = name.chars().count() > QUOTED_LEN;
        InvalidName { what, name: name.chars().take(QUOTED_LEN).collect(), truncated, why }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_pass_and_everything_else_is_refused_with_a_reason() {
        for ok in ["a", "label-audit", "p1", "0", &"a".repeat(63)] {
            assert_eq!(dns_label_problem(ok), Ok(()), "{ok:?}");
        }
        for (bad, why) in [
            ("", "must not be empty"),
            ("Label", "may contain only lowercase letters, digits and '-'"),
            ("a_b", "may contain only lowercase letters, digits and '-'"),
            ("a.b", "may contain only lowercase letters, digits and '-'"),
            ("a b", "may contain only lowercase letters, digits and '-'"),
            ("a\"b", "may contain only lowercase letters, digits and '-'"),
            ("a\nb", "may contain only lowercase letters, digits and '-'"),
            ("a\\b", "may contain only lowercase letters, digits and '-'"),
            ("é", "may contain only lowercase letters, digits and '-'"),
            (&"a".repeat(64), "is longer than 63 characters"),
            ("-a", "must start and end with a letter or digit"),
            ("a-", "must start and end with a letter or digit"),
        ] {
            assert_eq!(dns_label_problem(bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn errors_quote_the_name_escaped_and_shortened() {
        let e = check("tenant", "a\nb").unwrap_err();
        assert_eq!(e.to_string(), "tenant name \"a\\nb\" may contain only lowercase letters, digits and '-'");
        let long = "X".repeat(10_000);
        let msg = check("plugin", &long).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.starts_with(&format!("plugin name \"{}\"…", "X".repeat(80))), "{msg}");
    }

    #[test]
    fn the_config_refuses_the_same_names() {
        let text = "[[informer]]\nname = \"Cms\"\nsource = \"memory\"\n\
                    \n[[tenant]]\nname = \"a b\"\nnamespaces = [\"x\"]\n\
                    \n[[plugin]]\nname = \"p\\\"} 1\\nforged 1\"\nwasm = \"p.wasm\"\ninformer = \"Cms\"\n";
        let Err(e) = crate::config::Config::parse(text, "host.toml", ".") else { panic!("expected a config error") };
        let e = e.short_lines();
        for want in [
            "host.toml:2:8: informer name \"Cms\" may contain only lowercase letters, digits and '-'",
            "host.toml:6:8: tenant name \"a b\" may contain only lowercase letters, digits and '-'",
            "host.toml:10:8: plugin name \"p\\\"} 1\\nforged 1\" may contain only lowercase letters, digits and '-'",
        ] {
            assert!(e.iter().any(|l| l == want), "missing {want:?} in {e:#?}");
        }
    }
}
