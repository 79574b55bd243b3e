//! The request log: what the server received, in order, for tests to assert on.

/// What a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    List,
    Watch,
    /// `GET` of one object.
    Get,
    /// Anything else (unknown paths, other methods).
    Other,
}

/// One request the server received, in arrival order.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// Path and query exactly as sent.
    pub uri: String,
    pub path: String,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    pub kind: RequestKind,
}

impl RecordedRequest {
    /// The decoded value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    pub fn is_watch(&self) -> bool {
        self.kind == RequestKind::Watch
    }
    pub fn is_list(&self) -> bool {
        self.kind == RequestKind::List
    }
}
