//! Label and field selectors, parsed and matched as `labels.Parse` and the
//! field selectors of metadata do.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum LabelOp {
    Exists,
    NotExists,
    In,
    NotIn,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector (Kubernetes `labels.Parse`): requirements joined
/// by commas, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(pub(super) Vec<(String, LabelOp, Vec<String>)>);

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Not,
    Eq,
    NotEq,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

pub(super) fn lex(s: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                toks.push(Tok::NotEq);
            }
            '!' => toks.push(Tok::Not),
            '=' => {
                if chars.peek() == Some(&'=') {
                    chars.next();
                }
                toks.push(Tok::Eq);
            }
            '(' => toks.push(Tok::Open),
            ')' => toks.push(Tok::Close),
            ',' => toks.push(Tok::Comma),
            '>' => toks.push(Tok::Gt),
            '<' => toks.push(Tok::Lt),
            c => {
                let mut id = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || "!=(),<>".contains(n) {
                        break;
                    }
                    id.push(n);
                    chars.next();
                }
                toks.push(Tok::Ident(id));
            }
        }
    }
    toks
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e,!f,g in (x,y),h notin (z),i>1,j<2`. The empty
    /// string selects everything.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let err = |what: &str| format!("unable to parse requirement: {what} in label selector {s:?}");
        let toks = lex(s);
        let mut reqs = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            let negated = toks[i] == Tok::Not;
            if negated {
                i += 1;
            }
            let Some(Tok::Ident(key)) = toks.get(i) else { return Err(err("expected a key")) };
            i += 1;
            let ident = |i: usize| match toks.get(i) {
                Some(Tok::Ident(v)) => Some(v.clone()),
                _ => None,
            };
            let req = if negated {
                (key.clone(), LabelOp::NotExists, vec![])
            } else {
                match toks.get(i) {
                    None | Some(Tok::Comma) => (key.clone(), LabelOp::Exists, vec![]),
                    Some(op @ (Tok::Eq | Tok::NotEq)) => {
                        i += 1;
                        let value = ident(i).inspect(|_| i += 1).unwrap_or_default();
                        let op = if *op == Tok::Eq { LabelOp::In } else { LabelOp::NotIn };
                        (key.clone(), op, vec![value])
                    }
                    Some(op @ (Tok::Gt | Tok::Lt)) => {
                        i += 1;
                        let n =
                            ident(i).and_then(|v| v.parse::<i64>().ok()).ok_or_else(|| err("expected an integer"))?;
                        i += 1;
                        (key.clone(), if *op == Tok::Gt { LabelOp::Gt(n) } else { LabelOp::Lt(n) }, vec![])
                    }
                    Some(Tok::Ident(op)) if op == "in" || op == "notin" => {
                        let op = if op == "in" { LabelOp::In } else { LabelOp::NotIn };
                        i += 1;
                        if toks.get(i) != Some(&Tok::Open) {
                            return Err(err("expected '('"));
                        }
                        i += 1;
                        let mut values = Vec::new();
                        loop {
                            match toks.get(i) {
                                Some(Tok::Ident(v)) => values.push(v.clone()),
                                Some(Tok::Close) if values.is_empty() => {
                                    return Err(err("for 'in', 'notin' operators, values set can't be empty"));
                                }
                                _ => return Err(err("expected a value")),
                            }
                            i += 1;
                            match toks.get(i) {
                                Some(Tok::Comma) => i += 1,
                                Some(Tok::Close) => break,
                                _ => return Err(err("expected ',' or ')'")),
                            }
                        }
                        i += 1;
                        (key.clone(), op, values)
                    }
                    _ => return Err(err("unexpected token")),
                }
            };
            reqs.push(req);
            match toks.get(i) {
                None => break,
                Some(Tok::Comma) if i + 1 < toks.len() => i += 1,
                _ => return Err(err("expected ','")),
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj["metadata"]["labels"].as_object();
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|(key, op, values)| match (op, get(key)) {
            (LabelOp::Exists, v) => v.is_some(),
            (LabelOp::NotExists, v) => v.is_none(),
            (LabelOp::In, Some(v)) => values.iter().any(|x| x == v),
            (LabelOp::In, None) => false,
            (LabelOp::NotIn, Some(v)) => !values.iter().any(|x| x == v),
            (LabelOp::NotIn, None) => true,
            (LabelOp::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
            (LabelOp::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
            (LabelOp::Gt(_) | LabelOp::Lt(_), None) => false,
        })
    }
}

/// A parsed field selector over `metadata.name` and `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(pub(super) Vec<(bool, String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=a,metadata.namespace!=b` (`=`, `==`, `!=`).
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: {s:?}; can't understand {part:?}"));
            };
            let is_name = match field.trim() {
                "metadata.name" => true,
                "metadata.namespace" => false,
                other => return Err(format!("field label not supported: {other}")),
            };
            reqs.push((is_name, field.trim().to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub(super) fn matches(&self, key: &Key) -> bool {
        self.0.iter().all(|(is_name, _, equal, value)| {
            let actual = if *is_name { &key.name } else { &key.namespace };
            (actual == value) == *equal
        })
    }
}
