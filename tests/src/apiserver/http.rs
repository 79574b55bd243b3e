//! The HTTP/1.1 server: accepting connections, routing paths to resources,
//! dispatching requests, and the query-string and response helpers.

use super::*;

pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Connections live in the set: aborting this task closes them all.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Where a path points.
pub(super) struct Route {
    pub(super) ty: usize,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    /// `status` for `.../{name}/status`.
    pub(super) subresource: Option<String>,
}

pub(super) fn route(types: &[ResourceType], path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, plural, name, sub) = match rest {
        // Namespaces' own subresource: /api/v1/namespaces/{name}/status.
        ["namespaces", name, sub] if group.is_empty() && *sub == "status" => {
            (None, "namespaces", Some(*name), Some(*sub))
        }
        ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
        [plural] => (None, *plural, None, None),
        [plural, name] => (None, *plural, Some(*name), None),
        [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    let ty = types.iter().position(|t| t.group == group && t.version == version && t.plural == plural)?;
    let t = &types[ty];
    if namespace.is_some() && !t.namespaced {
        return None;
    }
    if t.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    if sub.is_some_and(|s| s != "status" || !t.status_subresource) {
        return None;
    }
    Some(Route {
        ty,
        namespace: namespace.map(Into::into),
        name: name.map(Into::into),
        subresource: sub.map(Into::into),
    })
}

/// The authorizer's verb for a request.
fn verb(method: &Method, kind: RequestKind) -> &'static str {
    match (method, kind) {
        (_, RequestKind::Watch) => "watch",
        (_, RequestKind::List) => "list",
        (_, RequestKind::Get) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, _) => "delete",
        _ => "unknown",
    }
}

pub(super) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let answered = Arc::new(OnceLock::new());
    let response = respond(shared, req, answered.clone()).await;
    let _ = answered.set(response.status().as_u16());
    Ok(response)
}

/// The API server's `MaxRequestBodyBytes`: 3 MiB.
const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The response to `req`; `answered` goes into its log entry, for
/// [`handle`] to fill with the status code.
async fn respond(shared: Arc<Shared>, req: Request<Incoming>, answered: Arc<OnceLock<u16>>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let uri = parts.uri.to_string();
    let path = parts.uri.path().to_string();
    let method = parts.method.clone();
    let query = parse_query(parts.uri.query().unwrap_or(""));
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    // Bodies are small in tests; reading them first lets the log hold them.
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let is_watch = match param("watch").map(|w| parse_bool(&w)) {
        None => false,
        Some(Some(b)) => b,
        Some(None) => return status_response(400, "BadRequest", "watch: invalid boolean value".into()),
    };
    let impersonate_user = header("impersonate-user");
    let (route, kind, failure, throttled, denied, latency) = {
        let mut st = shared.state.lock();
        let route = route(&st.types, &path);
        let kind = match (&route, &method) {
            (Some(r), &Method::GET) if r.name.is_some() => RequestKind::Get,
            (Some(_), &Method::GET) if is_watch => RequestKind::Watch,
            (Some(_), &Method::GET) => RequestKind::List,
            (Some(_), &Method::POST) => RequestKind::Create,
            (Some(_), &Method::PUT) => RequestKind::Update,
            (Some(_), &Method::PATCH) => RequestKind::Patch,
            (Some(_), &Method::DELETE) => RequestKind::Delete,
            (None, &Method::GET) if is_discovery_path(&path) => RequestKind::Discovery,
            _ => RequestKind::Other,
        };
        let rec = RecordedRequest {
            method: method.to_string(),
            uri,
            path: path.clone(),
            query: query.clone(),
            kind,
            content_type: header("content-type"),
            impersonate_user: impersonate_user.clone(),
            impersonate_groups: parts
                .headers
                .get_all("impersonate-group")
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_string))
                .collect(),
            user_agent: header("user-agent"),
            body: String::from_utf8_lossy(&body).into_owned(),
            at: tokio::time::Instant::now(),
            answered,
        };
        let throttled = take_throttle(&mut st.throttles, &rec);
        let failure = st.failures.iter().position(|f| (f.matches)(&rec)).map(|i| st.failures.remove(i).code);
        st.requests.push(rec);
        // Authorization comes before any handler, as the API server's filter chain has it.
        let denied = route.as_ref().and_then(|r| {
            let ty = &st.types[r.ty];
            let a = Attributes {
                ty,
                verb: verb(&method, kind),
                namespace: r.namespace.as_deref(),
                name: r.name.as_deref().unwrap_or(""),
                subresource: r.subresource.as_deref(),
            };
            authorize(&st.users, impersonate_user.as_deref(), &a).err()
        });
        let latency = match kind {
            RequestKind::Create | RequestKind::Update | RequestKind::Patch | RequestKind::Delete => st.write_latency,
            _ => std::time::Duration::ZERO,
        };
        (route, kind, failure, throttled, denied, latency)
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some((retry_after, style)) = throttled {
        return too_many_requests(retry_after, style);
    }
    if let Some(code) = failure {
        let message = match code {
            410 => "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to continue with a possibly inconsistent result.".to_string(),
            _ => format!("injected failure for {path}"),
        };
        return status_response(code, reason_for(code), message);
    }
    if kind == RequestKind::Discovery {
        return serve_discovery(&shared, &path);
    }
    let Some(route) = route else {
        return status_response(404, "NotFound", "the server could not find the requested resource".into());
    };
    if let Some(denied) = denied {
        return denied.response();
    }
    // The handlers decode at most `MaxRequestBodyBytes` of a write.
    let writes = [RequestKind::Create, RequestKind::Update, RequestKind::Patch, RequestKind::Delete];
    if writes.contains(&kind) && body.len() > MAX_REQUEST_BODY_BYTES {
        let message = format!("Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}");
        return status_response(413, "RequestEntityTooLarge", message);
    }
    match kind {
        RequestKind::Watch => {
            let plural = shared.state.lock().types[route.ty].plural.clone();
            let mut hold = shared.hold.subscribe();
            let _ = hold.wait_for(|held| !held.holds(&plural)).await;
            serve_watch(&shared, &route, &query)
        }
        RequestKind::Get => serve_get(&shared, &route),
        RequestKind::List => serve_list(&shared, &route, &query),
        RequestKind::Create | RequestKind::Update | RequestKind::Patch | RequestKind::Delete => {
            let content_type = header("content-type").unwrap_or_default();
            let user_agent = header("user-agent").unwrap_or_default();
            let write = WriteRequest {
                route: &route,
                query: &query,
                content_type: content_type.split(';').next().unwrap_or("").trim(),
                user_agent: &user_agent,
                body: &body,
            };
            serve_write(&shared, &method, &write)
        }
        _ => status_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".into(),
        ),
    }
}

pub(super) fn json_response(code: StatusCode, body: String) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync())
        .expect("response")
}
/// Go's `strconv.ParseBool`.
pub(super) fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Decodes an `application/x-www-form-urlencoded` query.
pub(super) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if s.get(i + 1..i + 3).is_some_and(|h| u8::from_str_radix(h, 16).is_ok()) => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("hex"));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
