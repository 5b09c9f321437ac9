//! Redirects followed by the middleware, above its retry loop.
//!
//! reqwest follows redirects inside the client, below every middleware, so a
//! retry layer there sees only the last hop's outcome while the request it
//! would repeat is the first. A POST answered `303 See Other` has been
//! processed; the 429 or the refused connection of the hop after it says
//! nothing about the POST, and a 303 may lead back to the very URL that was
//! POSTed, so comparing URLs cannot tell. The sound fix is the one Go's
//! `http.Client` has by design: follow redirects above the layer that
//! retries. The inner client hands every redirect up (the policy from
//! [`RetryMiddleware::redirect_policy`](crate::RetryMiddleware::redirect_policy)),
//! and the middleware sends each hop as a request of its own, retried by its
//! own method: a GET after a POST's 303 can be retried without repeating the
//! POST, and every outcome the retry loop sees is the outcome of the request
//! it holds.
//!
//! The hop rules are reqwest's own (through tower-http): 301 and 302 turn a
//! POST into a GET, 303 turns anything but HEAD into a GET, both without the
//! body; 307 and 308 keep method and body. Credentials (`Authorization`,
//! `Cookie`, `Proxy-Authorization`, `WWW-Authenticate`) are dropped when the
//! hop leaves the scheme, host and port, and `Referer` is set as reqwest's
//! default does. At most [`MAX_REDIRECTS`] hops are followed.

use http::header::{
    AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, LOCATION,
    PROXY_AUTHORIZATION, REFERER, TRANSFER_ENCODING, WWW_AUTHENTICATE,
};
use http::{HeaderValue, Method, StatusCode};
use reqwest::{Request, Response, Url};

/// Hops followed before the call fails with [`TooManyRedirects`], as
/// reqwest's default policy.
pub(crate) const MAX_REDIRECTS: u32 = 10;

/// The call met more redirects than the middleware follows.
///
/// Only a middleware that follows redirects itself (see
/// [`RetryMiddleware::redirect_policy`](crate::RetryMiddleware::redirect_policy))
/// returns it, inside [`reqwest_middleware::Error::Middleware`], where
/// reqwest itself would have returned an error whose `is_redirect()` is true.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too many redirects: {hops} followed, the last to {url}")]
pub struct TooManyRedirects {
    hops: u32,
    url: Url,
}

impl TooManyRedirects {
    pub(crate) fn new(hops: u32, url: Url) -> Self {
        Self { hops, url }
    }

    /// Redirects followed before giving up.
    pub fn hops(&self) -> u32 {
        self.hops
    }

    /// Where the last redirect pointed.
    pub fn url(&self) -> &Url {
        &self.url
    }
}

/// The request `response` redirects `request` to, or `None` when the
/// response is no redirect to follow: not a redirect status, no usable
/// `Location`, a scheme other than HTTP(S), or a hop that must carry a body
/// which `request` no longer has (`has_body` false: it was a stream, sent
/// once). The caller then gets the response as it came.
pub(crate) fn next_hop(
    response: &Response,
    mut request: Request,
    has_body: bool,
) -> Option<Request> {
    let status = response.status();
    let to_get = match status {
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => request.method() == Method::POST,
        StatusCode::SEE_OTHER => true,
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => false,
        _ => return None,
    };
    // A hop that keeps the body needs the one the request had: a bodiless
    // copy of a streamed request would send it on empty.
    if !to_get && !has_body {
        return None;
    }
    let location = response.headers().get(LOCATION)?.to_str().ok()?;
    let next = response.url().join(location).ok()?;
    if !matches!(next.scheme(), "http" | "https") {
        return None;
    }
    if to_get {
        if request.method() != Method::HEAD {
            *request.method_mut() = Method::GET;
        }
        *request.body_mut() = None;
        for name in [CONTENT_TYPE, CONTENT_LENGTH, CONTENT_ENCODING, TRANSFER_ENCODING] {
            request.headers_mut().remove(name);
        }
    }
    let previous = response.url();
    let origin = |url: &Url| {
        (url.scheme().to_owned(), url.host_str().map(str::to_owned), url.port_or_known_default())
    };
    if origin(&next) != origin(previous) {
        for name in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION, WWW_AUTHENTICATE] {
            request.headers_mut().remove(name);
        }
    }
    match referer(&next, previous) {
        Some(value) => request.headers_mut().insert(REFERER, value),
        None => request.headers_mut().remove(REFERER),
    };
    *request.url_mut() = next;
    Some(request)
}

/// The same resource: scheme, host, port, path and query. reqwest drops the
/// fragment from a response's URL, and user information says nothing about
/// which server answered. A response whose URL is not the request's is the
/// answer of a later hop.
pub(crate) fn same_resource(a: &Url, b: &Url) -> bool {
    (a.scheme(), a.host_str(), a.port_or_known_default(), a.path(), a.query())
        == (b.scheme(), b.host_str(), b.port_or_known_default(), b.path(), b.query())
}

/// The `Referer` of a hop from `previous` to `next`: none from HTTPS to HTTP,
/// and never a user, password or fragment.
fn referer(next: &Url, previous: &Url) -> Option<HeaderValue> {
    if next.scheme() == "http" && previous.scheme() == "https" {
        return None;
    }
    let mut referer = previous.clone();
    let _ = referer.set_username("");
    let _ = referer.set_password(None);
    referer.set_fragment(None);
    HeaderValue::from_str(referer.as_str()).ok()
}

/// A copy of `request` without its body: what a hop that drops the body
/// needs of a request whose body could not be copied.
pub(crate) fn bodiless(request: &Request) -> Request {
    let mut copy = Request::new(request.method().clone(), request.url().clone());
    *copy.headers_mut() = request.headers().clone();
    *copy.version_mut() = request.version();
    *copy.timeout_mut() = request.timeout().copied();
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redirect(status: u16, from: &str, location: &str) -> Response {
        use reqwest::ResponseBuilderExt;
        http::Response::builder()
            .status(status)
            .header(LOCATION, location)
            .url(Url::parse(from).unwrap())
            .body("")
            .unwrap()
            .into()
    }

    fn request(method: Method, url: &str) -> Request {
        let mut request = Request::new(method, Url::parse(url).unwrap());
        *request.body_mut() = Some("order=1".into());
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        headers.insert("idempotency-key", HeaderValue::from_static("k-1"));
        request
    }

    fn hop(status: u16, method: Method, location: &str) -> Option<Request> {
        let from = "https://a.test/orders";
        next_hop(&redirect(status, from, location), request(method, from), true)
    }

    #[test]
    fn see_other_turns_a_post_into_a_get_without_its_body() {
        let next = hop(303, Method::POST, "/orders/7").unwrap();
        assert_eq!((next.method(), next.url().as_str()), (&Method::GET, "https://a.test/orders/7"));
        assert!(next.body().is_none());
        assert!(next.headers().get(CONTENT_TYPE).is_none());
        assert_eq!(next.headers()["idempotency-key"], "k-1");
        assert_eq!(next.headers()[AUTHORIZATION], "Bearer t", "same origin keeps credentials");
        assert_eq!(next.headers()[REFERER], "https://a.test/orders");
        // HEAD stays HEAD.
        assert_eq!(hop(303, Method::HEAD, "/x").unwrap().method(), Method::HEAD);
    }

    #[test]
    fn moved_and_found_change_only_a_post() {
        for status in [301, 302] {
            assert_eq!(hop(status, Method::POST, "/x").unwrap().method(), Method::GET);
            let put = hop(status, Method::PUT, "/x").unwrap();
            assert_eq!(put.method(), Method::PUT);
            assert!(put.body().is_some(), "a PUT keeps its body");
        }
    }

    #[test]
    fn temporary_and_permanent_keep_method_and_body_if_there_is_one() {
        for status in [307, 308] {
            let next = hop(status, Method::POST, "/x").unwrap();
            assert_eq!(next.method(), Method::POST);
            assert_eq!(next.body().and_then(|b| b.as_bytes()), Some(&b"order=1"[..]));
            let from = "https://a.test/orders";
            let lost = next_hop(&redirect(status, from, "/x"), request(Method::POST, from), false);
            assert!(lost.is_none(), "a body sent once cannot go to the next hop");
        }
        // A 303 needs no body, so a stream's bodiless copy can follow it;
        // nothing that keeps the body can, whatever the method.
        let from = "https://a.test/orders";
        let copy = || bodiless(&request(Method::PUT, from));
        assert!(next_hop(&redirect(303, from, "/x"), copy(), false).is_some());
        for status in [301, 302, 307, 308] {
            let lost = next_hop(&redirect(status, from, "/x"), copy(), false);
            assert!(lost.is_none(), "{status}: a PUT would go on without its body");
        }
    }

    #[test]
    fn another_origin_gets_no_credentials() {
        for location in ["https://b.test/x", "http://a.test/x", "https://a.test:8443/x"] {
            let next = hop(302, Method::GET, location).unwrap();
            assert!(next.headers().get(AUTHORIZATION).is_none(), "{location}");
        }
        let down = hop(302, Method::GET, "http://a.test/x").unwrap();
        assert!(down.headers().get(REFERER).is_none(), "no Referer from HTTPS to HTTP");
    }

    #[test]
    fn what_is_not_a_redirect_to_follow_is_left_alone() {
        assert!(hop(200, Method::GET, "/x").is_none());
        assert!(hop(304, Method::GET, "/x").is_none());
        assert!(hop(302, Method::GET, "ftp://a.test/x").is_none());
        assert!(hop(302, Method::GET, "http://[::1").is_none());
        let from = "https://a.test/orders";
        let mut response = redirect(302, from, "/x");
        response.headers_mut().remove(LOCATION);
        assert!(next_hop(&response, request(Method::GET, from), true).is_none());
        response.headers_mut().insert(LOCATION, HeaderValue::from_bytes(b"/\xff").unwrap());
        assert!(next_hop(&response, request(Method::GET, from), true).is_none());
    }

    #[test]
    fn the_referer_names_no_user_nor_fragment() {
        let previous = Url::parse("https://user:pw@a.test/p?q=1#top").unwrap();
        let next = Url::parse("https://a.test/x").unwrap();
        assert_eq!(referer(&next, &previous).unwrap(), "https://a.test/p?q=1");
    }
}
