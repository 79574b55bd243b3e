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
}

pub(super) fn route(types: &[ResourceType], path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
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
    Some(Route { ty, namespace: namespace.map(Into::into), name: name.map(Into::into) })
}

pub(super) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let uri = req.uri().to_string();
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let is_watch = match param("watch").map(|w| parse_bool(&w)) {
        None => false,
        Some(Some(b)) => b,
        Some(None) => return Ok(status_response(400, "BadRequest", "watch: invalid boolean value".into())),
    };
    let (route, kind, failure) = {
        let mut st = shared.state.lock();
        let route = route(&st.types, &path);
        let kind = match (&route, req.method()) {
            (Some(r), &Method::GET) if r.name.is_some() => RequestKind::Get,
            (Some(_), &Method::GET) if is_watch => RequestKind::Watch,
            (Some(_), &Method::GET) => RequestKind::List,
            _ => RequestKind::Other,
        };
        let rec =
            RecordedRequest { method: req.method().to_string(), uri, path: path.clone(), query: query.clone(), kind };
        let failure = st.failures.iter().position(|f| (f.matches)(&rec)).map(|i| st.failures.remove(i).code);
        st.requests.push(rec);
        (route, kind, failure)
    };
    if let Some(code) = failure {
        let message = match code {
            410 => "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to continue with a possibly inconsistent result.".to_string(),
            _ => format!("injected failure for {path}"),
        };
        return Ok(status_response(code, reason_for(code), message));
    }
    let Some(route) = route else {
        return Ok(status_response(404, "NotFound", "the server could not find the requested resource".into()));
    };
    if req.method() != Method::GET {
        return Ok(status_response(
            405,
            "MethodNotAllowed",
            format!("{} is not supported by this server", req.method()),
        ));
    }
    Ok(match kind {
        RequestKind::Watch => {
            let mut hold = shared.hold.subscribe();
            let _ = hold.wait_for(|held| !*held).await;
            serve_watch(&shared, &route, &query)
        }
        RequestKind::Get => serve_get(&shared, &route),
        _ => serve_list(&shared, &route, &query),
    })
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
