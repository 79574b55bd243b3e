//! Kubernetes label selectors in their string form (`app=web,tier in (a,b),!legacy`).
//!
//! This module owns parsing and matching of label selectors for the
//! in-process sources (`manifests`, and anything else that filters objects by
//! labels itself). It follows apimachinery's `labels.Parse` grammar:
//!
//! - equality: `a=b`, `a==b`, `a!=b` (`a=` matches the empty value);
//! - set-based: `a in (x,y)`, `a notin (x)`, `a` (exists), `!a` (does not exist);
//! - a comma means AND; whitespace between tokens is ignored; the empty
//!   string selects everything;
//! - keys are qualified names (`[prefix/]name`, the prefix a DNS subdomain),
//!   values are label values (at most 63 characters, alphanumeric at both
//!   ends, `-`, `_`, `.` inside), exactly as the API server validates them;
//! - `in` and `notin` are keywords only where a key or an operator is
//!   expected (`a=in` is the value `in`, as in Go).
//!
//! kube-core's [`kube::core::Selector`] and [`Expression`] model a selector
//! but cannot parse the string form, so this module parses into kube's
//! [`Expression`] and converts to kube's selector ([`Selector::to_kube`]) when
//! a real API server should do the filtering. The numeric operators `>` and
//! `<` (`gt`, `lt`), which apimachinery accepts but kube's `Expression` cannot
//! express, are rejected with a clear error.
//!
//! It may not know where objects come from: it matches an
//! [`Object`] or any `(key, value)` iterator.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

pub use kube::core::Expression;

use crate::informer::Object;

/// A parsed label selector: every expression must hold (AND).
///
/// ```
/// use informer_host::source::selector::Selector;
/// let s: Selector = "app=web, tier in (front,back), !legacy".parse().unwrap();
/// assert!(s.matches_labels([("app", "web"), ("tier", "front")]));
/// assert!(!s.matches_labels([("app", "web"), ("tier", "front"), ("legacy", "")]));
/// assert_eq!(s.to_string(), "app=web,tier in (back,front),!legacy");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    expressions: Vec<Expression>,
}

/// Why a selector string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?} at column {column}: {kind}")]
pub struct SelectorError {
    /// The whole selector string.
    pub selector: String,
    /// 1-based character column where the problem was found.
    pub column: usize,
    pub kind: SelectorErrorKind,
}

/// What exactly was wrong with a selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorErrorKind {
    /// A token that does not fit the grammar at this place.
    #[error("found {found}, expected {expected}")]
    Unexpected { found: String, expected: &'static str },
    /// The key is not a qualified name.
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    /// The value is not a valid label value.
    #[error("invalid label value {value:?}: {reason}")]
    InvalidValue { value: String, reason: String },
    /// `key in ()` or `key notin ()`.
    #[error("the values of 'in' and 'notin' for key {key:?} can't be empty")]
    EmptySet { key: String },
    /// `>`/`<` (`gt`/`lt`), which apimachinery parses but this selector
    /// (like kube's `Expression`) does not support.
    #[error("operator {op:?} is not supported in label selectors here")]
    Unsupported { op: String },
}

impl Selector {
    /// The selector that selects everything (the empty string).
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Parses the string form; see the module docs for the grammar.
    pub fn parse(selector: &str) -> Result<Selector, SelectorError> {
        Parser::new(selector).parse()
    }

    /// True when there is no expression, so every object matches.
    pub fn is_everything(&self) -> bool {
        self.expressions.is_empty()
    }

    /// The expressions, in the order they were written.
    pub fn expressions(&self) -> &[Expression] {
        &self.expressions
    }

    /// The same selector as kube-core's type, e.g. for `ListParams::labels_from`.
    pub fn to_kube(&self) -> kube::core::Selector {
        self.expressions.iter().cloned().collect()
    }

    /// Whether the object's `metadata.labels` satisfy every expression.
    pub fn matches(&self, obj: &Object) -> bool {
        self.matches_with(|k| obj.label(k))
    }

    /// Whether a set of labels satisfies every expression. A key given
    /// twice keeps its last value.
    pub fn matches_labels<'a, I>(&self, labels: I) -> bool
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        if self.is_everything() {
            return true;
        }
        let map: BTreeMap<&str, &str> = labels.into_iter().collect();
        self.matches_with(|k| map.get(k).copied())
    }

    /// Whether the labels that `get` looks up satisfy every expression.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.expressions.iter().all(|e| match e {
            Expression::In(k, set) => get(k).is_some_and(|v| set.contains(v)),
            Expression::NotIn(k, set) => get(k).is_none_or(|v| !set.contains(v)),
            Expression::Equal(k, v) => get(k) == Some(v.as_str()),
            Expression::NotEqual(k, v) => get(k) != Some(v.as_str()),
            Expression::Exists(k) => get(k).is_some(),
            Expression::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

impl FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

impl TryFrom<&str> for Selector {
    type Error = SelectorError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Selector::parse(s)
    }
}

/// The canonical string form (kube's spelling: `a=b`, `a in (x,y)`, `!a`),
/// which parses back to an equal selector.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.expressions.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<Selector> for kube::core::Selector {
    fn from(s: Selector) -> Self {
        s.expressions.into_iter().collect()
    }
}

impl serde::Serialize for Selector {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Selector {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Selector::parse(&s).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------------
// Lexer and parser (apimachinery's labels.Lexer / labels.Parser).

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    End,
    Ident(String),
    In,
    NotIn,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::End => "end of string".into(),
            Tok::Ident(s) => format!("'{s}'"),
            Tok::In => "'in'".into(),
            Tok::NotIn => "'notin'".into(),
            Tok::Eq => "'='".into(),
            Tok::DoubleEq => "'=='".into(),
            Tok::NotEq => "'!='".into(),
            Tok::Bang => "'!'".into(),
            Tok::Gt => "'>'".into(),
            Tok::Lt => "'<'".into(),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::Comma => "','".into(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

/// Splits the selector into tokens with their 1-based character columns.
fn lex(input: &str) -> Vec<(Tok, usize)> {
    let chars: Vec<char> = input.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (tok, len) = match (c, next) {
            ('=', Some('=')) => (Tok::DoubleEq, 2),
            ('=', _) => (Tok::Eq, 1),
            ('!', Some('=')) => (Tok::NotEq, 2),
            ('!', _) => (Tok::Bang, 1),
            ('(', _) => (Tok::Open, 1),
            (')', _) => (Tok::Close, 1),
            (',', _) => (Tok::Comma, 1),
            ('>', _) => (Tok::Gt, 1),
            ('<', _) => (Tok::Lt, 1),
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !is_special(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let tok = match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                };
                out.push((tok, col));
                continue;
            }
        };
        out.push((tok, col));
        i += len;
    }
    out.push((Tok::End, chars.len() + 1));
    out
}

/// Where a token is read: in a value position the keywords are plain words.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyOrOperator,
    Values,
}

struct Parser<'a> {
    input: &'a str,
    tokens: Vec<(Tok, usize)>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser { input, tokens: lex(input), pos: 0 }
    }

    fn peek(&self, ctx: Context) -> (Tok, usize) {
        let (t, c) = self.tokens[self.pos.min(self.tokens.len() - 1)].clone();
        (as_context(t, ctx), c)
    }

    fn next(&mut self, ctx: Context) -> (Tok, usize) {
        let t = self.peek(ctx);
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn error(&self, column: usize, kind: SelectorErrorKind) -> SelectorError {
        SelectorError { selector: self.input.to_string(), column, kind }
    }

    fn unexpected(&self, found: &Tok, column: usize, expected: &'static str) -> SelectorError {
        self.error(column, SelectorErrorKind::Unexpected { found: found.describe(), expected })
    }

    fn parse(mut self) -> Result<Selector, SelectorError> {
        let mut expressions = Vec::new();
        loop {
            let (tok, col) = self.peek(Context::KeyOrOperator);
            match tok {
                Tok::End if expressions.is_empty() => break,
                Tok::Ident(_) | Tok::Bang | Tok::In | Tok::NotIn => {}
                other => {
                    let expected = if expressions.is_empty() {
                        "'!', a label key, or end of string"
                    } else {
                        "'!' or a label key after ','"
                    };
                    return Err(self.unexpected(&other, col, expected));
                }
            }
            expressions.push(self.requirement()?);
            let (tok, col) = self.next(Context::KeyOrOperator);
            match tok {
                Tok::End => break,
                Tok::Comma => continue,
                other => return Err(self.unexpected(&other, col, "',' or end of string")),
            }
        }
        Ok(Selector { expressions })
    }

    fn requirement(&mut self) -> Result<Expression, SelectorError> {
        let (mut tok, mut col) = self.next(Context::KeyOrOperator);
        let negated = tok == Tok::Bang;
        if negated {
            (tok, col) = self.next(Context::KeyOrOperator);
        }
        let key = match tok {
            Tok::Ident(k) => k,
            other => return Err(self.unexpected(&other, col, "a label key")),
        };
        if let Err(reason) = validate_key(&key) {
            return Err(self.error(col, SelectorErrorKind::InvalidKey { key, reason }));
        }
        if negated {
            return Ok(Expression::DoesNotExist(key));
        }
        let (op, op_col) = self.peek(Context::KeyOrOperator);
        match op {
            Tok::End | Tok::Comma => Ok(Expression::Exists(key)),
            Tok::Eq | Tok::DoubleEq | Tok::NotEq => {
                self.next(Context::KeyOrOperator);
                let value = self.exact_value()?;
                Ok(if op == Tok::NotEq { Expression::NotEqual(key, value) } else { Expression::Equal(key, value) })
            }
            Tok::In | Tok::NotIn => {
                self.next(Context::KeyOrOperator);
                let values = self.value_set()?;
                if values.is_empty() {
                    return Err(self.error(op_col, SelectorErrorKind::EmptySet { key }));
                }
                Ok(if op == Tok::In { Expression::In(key, values) } else { Expression::NotIn(key, values) })
            }
            Tok::Gt | Tok::Lt => {
                let op = if op == Tok::Gt { ">" } else { "<" };
                Err(self.error(op_col, SelectorErrorKind::Unsupported { op: op.into() }))
            }
            Tok::Ident(ref w) if w == "gt" || w == "lt" => {
                Err(self.error(op_col, SelectorErrorKind::Unsupported { op: w.clone() }))
            }
            other => Err(self.unexpected(&other, op_col, "'in', 'notin', '=', '==' or '!='")),
        }
    }

    /// The value after `=`, `==` or `!=`; nothing before ',' or the end is "".
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        let (tok, col) = self.peek(Context::Values);
        match tok {
            Tok::End | Tok::Comma => Ok(String::new()),
            Tok::Ident(v) => {
                self.next(Context::Values);
                self.checked_value(v, col)
            }
            other => Err(self.unexpected(&other, col, "a label value")),
        }
    }

    /// `( v1, v2, ... )`; empty members (`(,a)`) are the empty value, as in Go.
    fn value_set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let (tok, col) = self.next(Context::Values);
        if tok != Tok::Open {
            return Err(self.unexpected(&tok, col, "'('"));
        }
        let mut set = BTreeSet::new();
        // True right after '(' or ',': a value may come next.
        let mut want_value = true;
        loop {
            let (tok, col) = self.next(Context::Values);
            match tok {
                Tok::Ident(v) if want_value => {
                    set.insert(self.checked_value(v, col)?);
                    want_value = false;
                }
                Tok::Comma => {
                    if want_value {
                        set.insert(String::new());
                    }
                    want_value = true;
                }
                Tok::Close => {
                    // "(a,)" has an empty last member; "()" is the empty set.
                    if want_value && !set.is_empty() {
                        set.insert(String::new());
                    }
                    return Ok(set);
                }
                other if want_value => return Err(self.unexpected(&other, col, "a label value, ',' or ')'")),
                other => return Err(self.unexpected(&other, col, "',' or ')'")),
            }
        }
    }

    fn checked_value(&self, value: String, col: usize) -> Result<String, SelectorError> {
        match validate_value(&value) {
            Ok(()) => Ok(value),
            Err(reason) => Err(self.error(col, SelectorErrorKind::InvalidValue { value, reason })),
        }
    }
}

fn as_context(t: Tok, ctx: Context) -> Tok {
    match (t, ctx) {
        (Tok::In, Context::Values) => Tok::Ident("in".into()),
        (Tok::NotIn, Context::Values) => Tok::Ident("notin".into()),
        (t, _) => t,
    }
}

// ---------------------------------------------------------------------------
// apimachinery's validation (IsQualifiedName, IsDNS1123Subdomain, IsValidLabelValue).

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= PREFIX_MAX
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            !b.is_empty() && alnum(&b[0]) && alnum(&b[b.len() - 1]) && b.iter().all(|c| alnum(c) || *c == b'-')
        })
}

fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        None => (None, key),
        Some((p, n)) => (Some(p), n),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        if !is_dns1123_subdomain(p) {
            return Err(format!(
                "prefix part {p:?} must be a lowercase DNS subdomain of at most {PREFIX_MAX} characters \
                 (e.g. 'example.com')"
            ));
        }
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if name.len() > NAME_MAX {
        return Err(format!("name part must be no more than {NAME_MAX} characters"));
    }
    if !is_qualified_name_part(name) {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and \
                    end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc'), \
                    with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            .into());
    }
    Ok(())
}

fn validate_value(value: &str) -> Result<(), String> {
    if value.len() > NAME_MAX {
        return Err(format!("must be no more than {NAME_MAX} characters"));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        return Err("a label value must be empty or consist of alphanumeric characters, '-', '_' or '.', \
                    and must start and end with an alphanumeric character"
            .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
