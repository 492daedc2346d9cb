//! Who may call the API and the console (README "Security"). One middleware in front of every
//! route decides from the method and path which role a request needs, verifies the bearer
//! token (or the console's cookie) against the configured digests, applies the per-token rate
//! limit, and records every operate and admin action on a run in the run's event log with the
//! token's name before the action runs.
//!
//! Public without a token: `/healthz`, `/readyz` (probes), `/metrics` (counters by route and
//! status, no run ids or payloads), `/openapi.json` and `/docs` (the API's shape), and the
//! console's login page and static assets.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN, RETRY_AFTER, SET_COOKIE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use savepoint_core::ids::ThreadId;
use savepoint_runtime::config::Config;
use savepoint_runtime::security::{Principal, Role, TokenSet};
use std::num::NonZeroU32;
use std::sync::Arc;

use super::{ApiError, ApiState};

/// The console's cookie: the token itself, `HttpOnly` and `SameSite=Strict`.
pub(crate) const COOKIE_NAME: &str = "sp_token";

/// The API's access rules, built once from the config.
pub(crate) struct Auth {
    tokens: TokenSet,
    limiter: Option<DefaultKeyedRateLimiter<String>>,
}

impl Auth {
    /// From `[security]`: the tokens, and the rate limit if one is set.
    pub(crate) fn from_config(cfg: &Config) -> Result<Self, savepoint_runtime::security::SecurityError> {
        let sec = &cfg.security;
        let limiter = NonZeroU32::new(sec.rate_limit_per_sec).map(|rate| {
            let burst = NonZeroU32::new(sec.rate_limit_burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Ok(Self {
            tokens: sec.tokens()?,
            limiter,
        })
    }

    /// An open API: no tokens, no limit (tests, `savepoint dev`).
    #[cfg(test)]
    pub(crate) fn open() -> Self {
        Self {
            tokens: TokenSet::default(),
            limiter: None,
        }
    }

    /// True when tokens are configured.
    pub(crate) fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }
}

/// What a request needs: `None` for the public routes.
pub(crate) fn required_role(method: &Method, path: &str) -> Option<Role> {
    let public = matches!(
        path,
        "/healthz" | "/readyz" | "/metrics" | "/openapi.json" | "/ui/login" | "/ui/logout"
    ) || path == "/docs"
        || path.starts_with("/docs/")
        || path.starts_with("/ui/assets/");
    if public {
        return None;
    }
    if method == Method::GET || method == Method::HEAD {
        return Some(Role::Read);
    }
    // Anything that can make an effect run again: resolve, and time travel (fork, restart);
    // and what decides how a value is read (letting a run go of a value feature, saying a
    // child output's version).
    let admin = ["/resolve", "/fork", "/restart", "/forget-feature", "/output-version"];
    if method == Method::POST && path.starts_with("/v1/runs/") && admin.iter().any(|a| path.ends_with(a)) {
        return Some(Role::Admin);
    }
    Some(Role::Operate)
}

/// The operator action on a run named by a path (`/v1/runs/{id}/{action…}`), if it is one.
fn run_action<'a>(method: &Method, path: &'a str) -> Option<(&'a str, &'a str)> {
    if method != Method::POST {
        return None;
    }
    let rest = path.strip_prefix("/v1/runs/")?;
    let (thread, action) = rest.split_once('/')?;
    Some((thread, action))
}

enum Presented {
    None,
    Bearer(String),
    Cookie(String),
}

fn presented(headers: &HeaderMap) -> Presented {
    if let Some(v) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        return match v.get(..7) {
            Some(p) if p.eq_ignore_ascii_case("bearer ") => Presented::Bearer(v[7..].trim().to_owned()),
            _ => Presented::Bearer(String::new()),
        };
    }
    for c in headers.get_all(COOKIE).iter().filter_map(|v| v.to_str().ok()) {
        for pair in c.split(';') {
            if let Some(v) = pair.trim().strip_prefix("sp_token=") {
                return Presented::Cookie(v.to_owned());
            }
        }
    }
    Presented::None
}

fn unauthorized(message: &str) -> Response {
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"savepoint\""));
    r
}

/// A console page asked for without a valid cookie goes to the login page.
fn is_console_page(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// A cookie-authenticated write must come from the console's own origin (the cookie is
/// `SameSite=Strict` too; this also covers browsers that ignore it).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    origin.split_once("://").map(|(_, h)| h) == Some(host)
}

/// Who a request is from, or what to answer instead of serving it as someone.
enum Caller {
    /// A verified principal (the anonymous admin of an open API).
    Known(Principal),
    /// No valid token on a public route: served as it is.
    Public,
    /// Refused: the answer.
    Refused(Response),
}

/// The principal of an open API (no tokens configured): an anonymous admin.
fn anonymous() -> Principal {
    Principal {
        name: "anonymous".into(),
        role: Role::Admin,
    }
}

/// The token a request presents, and whether it came as the console's cookie.
fn token_of(headers: &HeaderMap) -> (Option<String>, bool) {
    match presented(headers) {
        Presented::Bearer(t) => (Some(t), false),
        Presented::Cookie(t) => (Some(t), true),
        Presented::None => (None, false),
    }
}

/// A request without a valid token: served on a public route, sent to the login page for a
/// console page, else refused (a token that is not valid, or none).
fn without_valid_token(method: &Method, path: &str, need: Option<Role>, token_given: bool) -> Caller {
    if need.is_none() {
        Caller::Public
    } else if is_console_page(path) && method == Method::GET {
        Caller::Refused(Redirect::to("/ui/login").into_response())
    } else if token_given {
        Caller::Refused(unauthorized("the token is not valid"))
    } else {
        Caller::Refused(unauthorized(
            "authentication required: send Authorization: Bearer <token> (savepoint --token / SAVEPOINT_TOKEN)",
        ))
    }
}

/// Who the request is from: the principal of its token (a cookie-authenticated write only
/// from the console's own origin), or what to do without one.
fn authenticate(auth: &Auth, method: &Method, path: &str, need: Option<Role>, headers: &HeaderMap) -> Caller {
    if !auth.enabled() {
        return Caller::Known(anonymous());
    }
    let (token, by_cookie) = token_of(headers);
    match token.as_deref().and_then(|t| auth.tokens.verify(t)) {
        Some(_) if by_cookie && method != Method::GET && method != Method::HEAD && !same_origin(headers) => {
            Caller::Refused(
                ApiError::new(StatusCode::FORBIDDEN, "cross-origin request with the console's cookie").into_response(),
            )
        }
        Some(p) => Caller::Known(p.clone()),
        None => without_valid_token(method, path, need, token.is_some()),
    }
}

/// The refusal of a principal whose role is below what the request needs, if it is.
fn role_refusal(principal: &Principal, need: Option<Role>, method: &Method, path: &str) -> Option<Response> {
    let need = need.filter(|need| principal.role < *need)?;
    Some(
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "token {:?} has role {}; {method} {path} needs {}",
                principal.name,
                principal.role.as_str(),
                need.as_str()
            ),
        )
        .into_response(),
    )
}

/// The `429` of a token over its rate limit: when to retry, in the message and `Retry-After`.
fn too_many_requests(name: &str, wait: std::time::Duration) -> Response {
    let mut r = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "rate limit of token {:?} reached (SAVEPOINT_RATE_LIMIT_PER_SEC); retry in {} ms",
            name,
            wait.as_millis().max(1)
        ),
    )
    .into_response();
    let secs = wait.as_secs().max(1).to_string();
    if let Ok(v) = HeaderValue::from_str(&secs) {
        r.headers_mut().insert(RETRY_AFTER, v);
    }
    r
}

/// The refusal of a principal over the per-token rate limit, if it is (and idle keys are
/// forgotten now and then).
fn rate_refusal(auth: &Auth, principal: &Principal) -> Option<Response> {
    let limiter = auth.limiter.as_ref()?;
    if let Err(not_until) = limiter.check_key(&principal.name) {
        let wait = not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
        return Some(too_many_requests(&principal.name, wait));
    }
    // Keys are token names, a bounded set; forget idle ones now and then all the same.
    if limiter.len() > 1024 {
        limiter.retain_recent();
    }
    None
}

/// The middleware: authenticate, authorise, limit, audit.
pub(crate) async fn guard(State(st): State<ApiState>, mut req: Request, next: Next) -> Response {
    let auth = st.auth.clone();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let need = required_role(&method, &path);
    let principal = match authenticate(&auth, &method, &path, need, req.headers()) {
        Caller::Known(p) => p,
        Caller::Public => return next.run(req).await,
        Caller::Refused(r) => return r,
    };
    if let Some(r) = role_refusal(&principal, need, &method, &path) {
        return r;
    }
    if let Some(r) = rate_refusal(&auth, &principal) {
        return r;
    }
    if auth.enabled() {
        if let Some((raw, action)) = run_action(&method, &path) {
            audit(&st, raw, &principal.name, &format!("{method} {action}")).await;
        }
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

/// Records `who` asked for `action` on the run (best effort before the action: a run that
/// does not exist, or a store that is away, is answered by the handler itself).
pub(crate) async fn audit(st: &ApiState, raw_thread: &str, who: &str, action: &str) {
    let Ok(svc) = st.services() else { return };
    let Ok(thread) = ThreadId::new(raw_thread.to_owned()) else {
        return;
    };
    if let Err(e) = svc.store.audit(&thread, who, action).await {
        tracing::warn!(thread.id = %thread, error = %e, "could not record the operator action");
    }
}

/// `GET /ui/login`: the console's sign-in page.
pub(crate) async fn login_page() -> Html<String> {
    Html(login_html(None))
}

fn login_html(error: Option<&str>) -> String {
    let error = error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{e}</p>"))
        .unwrap_or_default();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign in · Savepoint</title>\
         <link rel=\"stylesheet\" href=\"/ui/assets/console.css\"></head><body><main class=\"login\">\
         <h1>Savepoint console</h1>{error}<form method=\"post\" action=\"/ui/login\">\
         <label for=\"token\">API token</label> <input id=\"token\" name=\"token\" type=\"password\" \
         autocomplete=\"current-password\" required> <button type=\"submit\">Sign in</button></form>\
         <p>Ask your operator for a token with at least the <code>read</code> role \
         (<code>savepoint token new</code>).</p></main></body></html>"
    )
}

/// `POST /ui/login` (form `token=…`): sets the console's cookie and goes to the runs page.
pub(crate) async fn login(State(st): State<ApiState>, body: axum::body::Bytes) -> Response {
    let token = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    if !st.auth.enabled() {
        return Redirect::to("/ui").into_response();
    }
    if st.auth.tokens.verify(&token).is_none() {
        return (
            StatusCode::UNAUTHORIZED,
            Html(login_html(Some("That token is not valid."))),
        )
            .into_response();
    }
    let cookie = format!("{COOKIE_NAME}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200");
    let mut r = Redirect::to("/ui").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r
}

/// `POST /ui/logout`: forgets the cookie.
pub(crate) async fn logout() -> Response {
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut().insert(
        SET_COOKIE,
        HeaderValue::from_static("sp_token=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

/// Shared handle.
pub(crate) type SharedAuth = Arc<Auth>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_by_route() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(required_role(&get, "/healthz"), None);
        assert_eq!(required_role(&get, "/metrics"), None);
        assert_eq!(required_role(&get, "/ui/assets/console.js"), None);
        assert_eq!(required_role(&get, "/v1/runs"), Some(Role::Read));
        assert_eq!(required_role(&get, "/ui/runs/x"), Some(Role::Read));
        assert_eq!(required_role(&post, "/v1/runs"), Some(Role::Operate));
        assert_eq!(required_role(&post, "/v1/runs/x/cancel"), Some(Role::Operate));
        assert_eq!(required_role(&post, "/v1/runs/x/resolve"), Some(Role::Admin));
        assert_eq!(required_role(&post, "/v1/runs/x/effects/resolve"), Some(Role::Admin));
        assert_eq!(required_role(&post, "/v1/runs/x/fork"), Some(Role::Admin));
        assert_eq!(required_role(&post, "/v1/runs/x/restart"), Some(Role::Admin));
        assert_eq!(required_role(&Method::DELETE, "/v1/runs/x"), Some(Role::Operate));
        assert_eq!(
            run_action(&post, "/v1/runs/t-1/signals/go"),
            Some(("t-1", "signals/go"))
        );
        assert_eq!(run_action(&post, "/v1/runs"), None);
        assert!(!Auth::open().enabled());
    }
}
