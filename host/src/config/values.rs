//! Typed values read with their spans: durations, deadlines, sizes, fuel,
//! counts, names and grants, each checked and reported at the value's
//! line and column; and the conversions the sections share.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::{Cx, Location, MAX_DEADLINE, S};
use crate::plugin::Grants;

impl Cx<'_> {
    pub(super) fn duration(&mut self, v: &S<String>, what: &str) -> Option<Duration> {
        match humantime::parse_duration(v.get_ref().trim()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(
                    v.span(),
                    format!("`{what}`: invalid duration {:?}: {e} (examples: \"500ms\", \"30s\", \"5m\")", v.get_ref()),
                );
                None
            }
        }
    }

    pub(super) fn name(&mut self, v: &S<String>, what: &'static str, seen: &mut HashMap<String, Location>) -> bool {
        let name = v.get_ref();
        // A DNS label: it shows as is in logs, metric labels and URLs.
        if let Err(e) = crate::names::check(what, name) {
            self.error(v.span(), e.to_string());
            return false;
        }
        let here = self.location(v.span().start);
        if let Some(first) = seen.get(name) {
            self.error(v.span(), format!("duplicate {what} name {name:?} (first defined at line {})", first.line));
            return false;
        }
        seen.insert(name.clone(), here);
        true
    }

    /// `grants = [...]`: each a name in `allowed` (a plugin's or a
    /// controller's), none twice. The grants, and their names in file order.
    pub(super) fn grants(&mut self, names: Option<&[S<String>]>, allowed: &[&str]) -> (Grants, Vec<String>) {
        let mut grants = Grants::default();
        let mut seen: Vec<String> = Vec::new();
        for g in names.unwrap_or_default() {
            let name = g.get_ref().as_str();
            if seen.iter().any(|n| n == name) {
                self.error(g.span(), format!("duplicate grant {name:?}"));
                continue;
            }
            let ok = allowed.contains(&name);
            match name {
                "log" if ok => grants.log = true,
                "cache" if ok => grants.cache = true,
                "kube" if ok => grants.kube = true,
                "clocks" if ok => grants.clocks = true,
                _ => {
                    self.error(g.span(), format!("unknown grant {name:?}, expected one of {}", quoted(allowed)));
                    continue;
                }
            }
            seen.push(name.to_string());
        }
        (grants, seen)
    }

    /// `fuel_per_call`: `Some(None)` is `"unlimited"`; `None` after an error.
    pub(super) fn fuel(&mut self, v: &S<toml::Value>) -> Option<Option<u64>> {
        match v.get_ref() {
            toml::Value::Integer(n) if *n > 0 => Some(Some(*n as u64)),
            toml::Value::String(s) if s == "unlimited" => Some(None),
            _ => {
                self.error(v.span(), "`fuel_per_call` must be a positive integer or \"unlimited\"");
                None
            }
        }
    }

    /// A positive duration of at most [`MAX_DEADLINE`].
    pub(super) fn deadline(&mut self, v: &S<String>) -> Option<Duration> {
        let d = self.duration(v, "deadline")?;
        if d.is_zero() {
            self.error(v.span(), "`deadline` must be greater than zero");
            return None;
        }
        if d > MAX_DEADLINE {
            self.error(
                v.span(),
                format!(
                    "`deadline` {:?} is longer than the maximum of {}",
                    v.get_ref(),
                    humantime::format_duration(MAX_DEADLINE)
                ),
            );
            return None;
        }
        Some(d)
    }

    /// A positive size: `"64MiB"` or a number of bytes.
    pub(super) fn size(&mut self, v: &S<toml::Value>, what: &str) -> Option<usize> {
        match v.get_ref() {
            toml::Value::Integer(n) if *n > 0 => Some(*n as usize),
            toml::Value::String(s) => match parse_size(s) {
                Ok(n) if n > 0 => Some(n),
                Ok(_) => {
                    self.error(v.span(), format!("`{what}` must be greater than zero"));
                    None
                }
                Err(e) => {
                    self.error(v.span(), format!("`{what}`: {e}"));
                    None
                }
            },
            _ => {
                self.error(v.span(), format!("`{what}` must be a size such as \"64MiB\" or a number of bytes"));
                None
            }
        }
    }

    /// A positive integer.
    pub(super) fn count(&mut self, v: &S<toml::Value>, what: &str) -> Option<usize> {
        match v.get_ref() {
            toml::Value::Integer(n) if *n > 0 => Some(*n as usize),
            _ => {
                self.error(v.span(), format!("`{what}` must be a positive integer"));
                None
            }
        }
    }
}

pub(super) fn quoted(names: &[&str]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

/// TOML to JSON; datetimes become their RFC 3339 text.
pub(super) fn to_json(v: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => J::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

/// Parses `64MiB`, `512 KiB`, `1GB`, `4096` (bytes).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    if num.is_empty() {
        return Err(format!("invalid size {s:?} (examples: \"64MiB\", \"512KiB\", \"1GiB\")"));
    }
    let n: u128 = num.parse().map_err(|e| format!("invalid size {s:?}: {e}"))?;
    let units: BTreeMap<&str, u128> = [
        ("", 1),
        ("b", 1),
        ("kb", 1000),
        ("mb", 1000 * 1000),
        ("gb", 1000 * 1000 * 1000),
        ("kib", 1 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
    ]
    .into_iter()
    .collect();
    let unit = unit.trim().to_ascii_lowercase();
    let Some(mult) = units.get(unit.as_str()) else {
        return Err(format!("unknown size unit in {s:?}, expected B, KiB, MiB, GiB, KB, MB or GB"));
    };
    usize::try_from(n * mult).map_err(|_| format!("size {s:?} is too large"))
}
