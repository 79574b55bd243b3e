//! Reads: GET of one object, lists (resourceVersion semantics, paging,
//! selectors) and watch streams (backlog, bookmarks, drops, 410s).

use super::*;

/// How a watch from a compacted resourceVersion is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GoneStyle {
    /// `200 OK`, then one `ERROR` event with a `410 Expired` Status, then the
    /// end of the stream: what a server with the watch cache sends.
    #[default]
    ErrorEvent,
    /// An HTTP `410 Gone` response whose body is the `Expired` Status.
    HttpStatus,
}
pub(super) enum Signal {
    Event(Arc<Entry>),
    Bookmark(u64),
    /// Close the connection abruptly.
    Drop,
    /// Send an `ERROR` 410 event, then end the stream.
    Expire {
        oldest: u64,
    },
}
pub(super) fn serve_get(shared: &Shared, route: &Route) -> Response<Body> {
    let st = shared.state.lock();
    let ty = &st.types[route.ty];
    let name = route.name.clone().unwrap_or_default();
    let key = Key { ty: route.ty, namespace: route.namespace.clone().unwrap_or_default(), name: name.clone() };
    match st.objects.get(&key) {
        Some(obj) => json_response(StatusCode::OK, obj.to_string()),
        None => ApiError::not_found(ty, &name).response(),
    }
}

/// What a list or watch selects: type, namespace, labels, fields.
pub(super) struct Filter {
    pub(super) ty: usize,
    pub(super) namespace: Option<String>,
    pub(super) labels: LabelSelector,
    pub(super) fields: FieldSelector,
}

impl Filter {
    pub(super) fn new(route: &Route, query: &[(String, String)]) -> Result<Filter, String> {
        let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("");
        Ok(Filter {
            ty: route.ty,
            namespace: route.namespace.clone(),
            labels: LabelSelector::parse(param("labelSelector"))?,
            fields: FieldSelector::parse(param("fieldSelector"))?,
        })
    }

    pub(super) fn is_filtered(&self) -> bool {
        !self.labels.0.is_empty() || !self.fields.0.is_empty()
    }

    pub(super) fn selects(&self, key: &Key, obj: &Value) -> bool {
        key.ty == self.ty
            && self.namespace.as_ref().is_none_or(|ns| *ns == key.namespace)
            && self.labels.matches(obj)
            && self.fields.matches(key)
    }

    /// The event this watch sees for `e`, as a JSON line, if any.
    pub(super) fn render(&self, e: &Entry) -> Option<String> {
        let now = self.selects(&e.key, &e.object);
        let before = e.prev.as_ref().is_some_and(|p| self.selects(&e.key, p));
        match e.change {
            Change::Added if now => Some(event_line("ADDED", &e.object)),
            Change::Deleted if now => Some(event_line("DELETED", &e.object)),
            Change::Modified if now && before => Some(event_line("MODIFIED", &e.object)),
            Change::Modified if now => Some(event_line("ADDED", &e.object)),
            Change::Modified if before => {
                // It left the selection: its previous state, at this version.
                let mut gone = e.prev.as_deref().cloned().unwrap_or_default();
                gone["metadata"]["resourceVersion"] = json!(e.rv.to_string());
                Some(event_line("DELETED", &gone))
            }
            _ => None,
        }
    }
}

pub(super) fn serve_list(shared: &Shared, route: &Route, query: &[(String, String)]) -> Response<Body> {
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let filter = match Filter::new(route, query) {
        Ok(f) => f,
        Err(msg) => return status_response(400, "BadRequest", msg),
    };
    let limit = match param("limit").map(str::parse::<i64>) {
        None => None,
        Some(Ok(n)) => (n > 0).then_some(n as usize),
        Some(Err(_)) => return status_response(400, "BadRequest", "limit: invalid value".into()),
    };
    let st = shared.state.lock();
    let ty = &st.types[route.ty];
    let (snapshot_rv, start_after, limit) = if let Some(token) = param("continue") {
        if param("resourceVersion").is_some() {
            return status_response(
                400,
                "BadRequest",
                "specifying resource version is not allowed when using continue".into(),
            );
        }
        let Some((rv, start)) = decode_continue(token) else {
            return status_response(400, "BadRequest", "continue key is not valid".into());
        };
        if rv < st.compacted {
            let mut status = status_object(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to continue with a possibly inconsistent result.".into(),
            );
            status["metadata"] = json!({"continue": encode_continue(st.rv, &start)});
            return json_response(StatusCode::GONE, status.to_string());
        }
        (rv, Some(start), limit)
    } else {
        let rv = param("resourceVersion");
        let rvm = param("resourceVersionMatch");
        match (rv, rvm) {
            (None, Some(_)) => {
                return status_response(
                    400,
                    "BadRequest",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
                );
            }
            (None, None) => (st.rv, None, limit),
            (Some(v), m) => {
                let Ok(n) = v.parse::<u64>() else {
                    return status_response(400, "BadRequest", format!("resourceVersion: Invalid value: {v:?}"));
                };
                match m {
                    None | Some("NotOlderThan") if n > st.rv => return too_large(n, st.rv),
                    // "0" is served from the watch cache, which ignores limit.
                    None | Some("NotOlderThan") => (st.rv, None, if n == 0 { None } else { limit }),
                    Some("Exact") if n == 0 => {
                        return status_response(
                            400,
                            "BadRequest",
                            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"".into(),
                        );
                    }
                    Some("Exact") if n < st.compacted => {
                        return status_response(
                            410,
                            "Expired",
                            format!("too old resource version: {n} ({})", st.compacted),
                        );
                    }
                    Some("Exact") if n > st.rv => return too_large(n, st.rv),
                    Some("Exact") => (n, None, limit),
                    Some(other) => {
                        return status_response(
                            400,
                            "BadRequest",
                            format!("resourceVersionMatch: Unsupported value: {other:?}"),
                        );
                    }
                }
            }
        }
    };
    let snapshot = st.snapshot_at(snapshot_rv);
    let range = match &start_after {
        Some(k) => snapshot.range((Bound::Excluded(k.clone()), Bound::Unbounded)),
        None => snapshot.range(..),
    };
    let mut selected = range.filter(|(k, v)| filter.selects(k, v));
    let mut items: Vec<String> = Vec::new();
    let mut last_key = None;
    for (k, v) in selected.by_ref() {
        items.push(v.to_string());
        last_key = Some(k.clone());
        if limit.is_some_and(|l| items.len() >= l) {
            break;
        }
    }
    let remaining = selected.count();
    let mut metadata = json!({"resourceVersion": snapshot_rv.to_string()});
    if remaining > 0
        && let Some(k) = last_key
    {
        metadata["continue"] = json!(encode_continue(snapshot_rv, &k));
        if !filter.is_filtered() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    let body = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[{}]}}",
        json!(format!("{}List", ty.kind)),
        json!(ty.api_version()),
        metadata,
        items.join(",")
    );
    json_response(StatusCode::OK, body)
}

pub(super) fn too_large(requested: u64, current: u64) -> Response<Body> {
    let mut status =
        status_object(504, "Timeout", format!("Too large resource version: {requested}, current: {current}"));
    status["details"] = json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1
    });
    let mut response = json_response(StatusCode::GATEWAY_TIMEOUT, status.to_string());
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    response
}

pub(super) fn serve_watch(shared: &Arc<Shared>, route: &Route, query: &[(String, String)]) -> Response<Body> {
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let filter = match Filter::new(route, query) {
        Ok(f) => f,
        Err(msg) => return status_response(400, "BadRequest", msg),
    };
    let bookmarks = match param("allowWatchBookmarks").map(parse_bool) {
        None => false,
        Some(Some(b)) => b,
        Some(None) => return status_response(400, "BadRequest", "allowWatchBookmarks: invalid value".into()),
    };
    let timeout = match param("timeoutSeconds").map(str::parse::<u64>) {
        None => None,
        Some(Ok(s)) => Some(Duration::from_secs(s)),
        Some(Err(_)) => return status_response(400, "BadRequest", "timeoutSeconds: invalid value".into()),
    };
    let from = match param("resourceVersion").map(str::parse::<u64>) {
        None | Some(Ok(0)) => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return status_response(400, "BadRequest", "resourceVersion: invalid value".into()),
    };
    // Watch-list (apimachinery's ValidateListOptions): sendInitialEvents
    // needs resourceVersionMatch=NotOlderThan, which a plain watch may not
    // carry; allowWatchBookmarks is not checked.
    let initial_events = param("sendInitialEvents").and_then(parse_bool).unwrap_or(false);
    let rvm = param("resourceVersionMatch");
    let invalid =
        |cause: &str| status_response(422, "Invalid", format!("ListOptions.meta.k8s.io \"\" is invalid: {cause}"));
    match (initial_events, rvm) {
        (true, Some("NotOlderThan")) => {}
        (true, _) => {
            return invalid(
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            );
        }
        (false, Some(_)) => {
            return invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            );
        }
        (false, None) => {}
    }
    if initial_events && !shared.state.lock().watch_list {
        return invalid(
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        );
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let mut lines = Vec::new();
    let ty = {
        let mut st = shared.state.lock();
        if initial_events {
            // The state now (at least as new as any resourceVersion given),
            // then the bookmark that ends it, then changes after it.
            lines.extend(st.objects.iter().filter(|(k, v)| filter.selects(k, v)).map(|(_, v)| event_line("ADDED", v)));
            let ty = &st.types[route.ty];
            let end = json!({
                "kind": ty.kind,
                "apiVersion": ty.api_version(),
                "metadata": {
                    "resourceVersion": st.rv.to_string(),
                    "creationTimestamp": null,
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            });
            lines.push(event_line("BOOKMARK", &end));
        } else {
            match from {
                Some(n) if n < st.compacted => {
                    let message = format!("too old resource version: {n} ({})", st.compacted);
                    return match st.gone_style {
                        GoneStyle::HttpStatus => status_response(410, "Expired", message),
                        GoneStyle::ErrorEvent => {
                            let line = event_line("ERROR", &status_object(410, "Expired", message));
                            let body = Full::new(Bytes::from(line)).map_err(|never| match never {}).boxed_unsync();
                            watch_response(body)
                        }
                    };
                }
                // Events strictly after n.
                Some(n) => {
                    lines.extend(st.log.iter().filter(|e| e.rv > n).filter_map(|e| filter.render(e)));
                }
                // Get state and start at most recent: synthetic adds.
                None => {
                    lines.extend(
                        st.objects.iter().filter(|(k, v)| filter.selects(k, v)).map(|(_, v)| event_line("ADDED", v)),
                    );
                }
            }
        }
        st.watchers.push(tx);
        st.types[route.ty].clone()
    };
    let (body_tx, mut body_rx) = mpsc::unbounded_channel::<Result<Frame<Bytes>, std::io::Error>>();
    shared.open_watches.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(watch_task(shared.clone(), filter, ty, bookmarks, timeout, lines, rx, body_tx));
    let stream = futures::stream::poll_fn(move |cx| body_rx.poll_recv(cx));
    watch_response(StreamBody::new(stream).boxed_unsync())
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn watch_task(
    shared: Arc<Shared>,
    filter: Filter,
    ty: ResourceType,
    bookmarks: bool,
    timeout: Option<Duration>,
    backlog: Vec<String>,
    mut signals: mpsc::UnboundedReceiver<Signal>,
    body: mpsc::UnboundedSender<Result<Frame<Bytes>, std::io::Error>>,
) {
    struct Open(Arc<Shared>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _open = Open(shared);
    let send = |line: String| body.send(Ok(Frame::data(Bytes::from(line)))).is_ok();
    for line in backlog {
        if !send(line) {
            return;
        }
    }
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        let signal = tokio::select! {
            s = signals.recv() => s,
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => return,
            _ = body.closed() => return,
        };
        match signal {
            None => return,
            Some(Signal::Event(e)) => {
                if let Some(line) = filter.render(&e)
                    && !send(line)
                {
                    return;
                }
            }
            Some(Signal::Bookmark(rv)) => {
                if bookmarks {
                    let obj = json!({
                        "kind": ty.kind,
                        "apiVersion": ty.api_version(),
                        "metadata": {"resourceVersion": rv.to_string(), "creationTimestamp": null},
                    });
                    if !send(event_line("BOOKMARK", &obj)) {
                        return;
                    }
                }
            }
            Some(Signal::Drop) => {
                // A body error makes hyper abort the connection mid-chunk.
                let _ = body.send(Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "dropped by test")));
                return;
            }
            Some(Signal::Expire { oldest }) => {
                let status =
                    status_object(410, "Expired", format!("too old resource version: watch expired ({oldest})"));
                let _ = send(event_line("ERROR", &status));
                return;
            }
        }
    }
}

pub(super) fn event_line(kind: &str, object: &Value) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
}

pub(super) fn watch_response(body: Body) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .expect("response")
}
pub(super) fn encode_continue(rv: u64, start: &Key) -> String {
    let raw = format!("{rv}\0{}\0{}\0{}", start.ty, start.namespace, start.name);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn decode_continue(token: &str) -> Option<(u64, Key)> {
    let bytes: Option<Vec<u8>> =
        (0..token.len()).step_by(2).map(|i| token.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\0');
    let rv = parts.next()?.parse().ok()?;
    let ty = parts.next()?.parse().ok()?;
    let key = Key { ty, namespace: parts.next()?.into(), name: parts.next()?.into() };
    Some((rv, key))
}
