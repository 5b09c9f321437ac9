//! Credentials and keys on redirect hops: each reaches exactly the hops
//! reqwest itself sends it to, whichever client follows the redirect.

use crate::support;
use http::{HeaderMap, HeaderValue};
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use reqwest_safe_retry::{RetryConfig, RetryMiddleware, clock::ManualClock};
use std::sync::Arc;
use support::hops::BOUND;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::chains::{Chains, sensitive};

/// Where a credential comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Set on the request.
    Request,
    /// The client's `default_headers`.
    Default,
    /// A middleware inside the retry layer, once per attempt.
    Inner,
    /// A cookie store holding a cookie for `A`'s host.
    Jar,
}

impl Source {
    const ALL: [Source; 4] = [Source::Request, Source::Default, Source::Inner, Source::Jar];

    /// The builder both clients are built from.
    fn builder(self, a: &str) -> reqwest::ClientBuilder {
        self.on(reqwest::Client::builder().no_proxy(), a)
    }

    /// `builder` with what this source sets on the client.
    fn on(self, builder: reqwest::ClientBuilder, a: &str) -> reqwest::ClientBuilder {
        match self {
            Source::Default => {
                let mut headers = HeaderMap::new();
                headers.insert("authorization", HeaderValue::from_static("Bearer default"));
                headers.insert("cookie", HeaderValue::from_static("default=1"));
                headers.insert("cookie2", HeaderValue::from_static("default=2"));
                builder.default_headers(headers)
            }
            Source::Jar => {
                let jar = reqwest::cookie::Jar::default();
                jar.add_cookie_str("session=jar", &a.parse().unwrap());
                builder.cookie_provider(Arc::new(jar))
            }
            Source::Request | Source::Inner => builder,
        }
    }

    /// The request, with what this source sets on it.
    fn request(
        self,
        client: &ClientWithMiddleware,
        url: &str,
    ) -> reqwest_middleware::RequestBuilder {
        let request = client.get(url);
        match self {
            Source::Request => request
                .header("authorization", "Bearer request")
                .header("cookie", "request=1")
                .header("proxy-authorization", "Basic cmVxdWVzdA==")
                .header("www-authenticate", "Basic"),
            _ => request,
        }
    }
}

/// A middleware that adds a token to every request it passes on.
struct Token;

#[async_trait::async_trait]
impl Middleware for Token {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        request.headers_mut().insert("authorization", HeaderValue::from_static("Bearer inner"));
        next.run(request, extensions).await
    }
}

/// The same builder without the middleware: reqwest follows redirects.
fn plain(source: Source, a: &str) -> ClientWithMiddleware {
    let client = source.builder(a).build().unwrap();
    let builder = reqwest_middleware::ClientBuilder::new(client);
    match source {
        Source::Inner => builder.with(Token).build(),
        _ => builder.build(),
    }
}

/// The same builder through the quick start, a manual clock injected.
fn ours(source: Source, a: &str) -> ClientWithMiddleware {
    let retry = RetryMiddleware::new(RetryConfig::default()).with_clock(ManualClock::new());
    let builder = retry.client(source.builder(a)).unwrap();
    match source {
        Source::Inner => builder.with(Token).build(),
        _ => builder.build(),
    }
}

/// Every redirect status, every chain, every source: each hop receives the
/// same credentials through the middleware as without it.
#[tokio::test]
async fn credentials_reach_only_the_hops_reqwest_sends_them_to() {
    let chains = Chains::start().await;
    let mut differences = Vec::new();
    for status in [301, 302, 303, 307, 308] {
        for chain in ["AA", "AB", "ABB", "ABA", "AAB", "ABAB"] {
            for source in Source::ALL {
                let mut seen = Vec::new();
                for client in [plain(source, &chains.a.uri()), ours(source, &chains.a.uri())] {
                    let (url, prefix) = chains.url(status, chain);
                    let call = source.request(&client, &url).send();
                    let response = tokio::time::timeout(BOUND, call).await.unwrap().unwrap();
                    assert_eq!(response.status(), 200, "{status} {chain} {source:?}");
                    seen.push(chains.arrivals(&prefix).await);
                }
                if seen[0] != seen[1] {
                    differences.push(format!(
                        "{status} {chain} {source:?}:\n  reqwest: {:?}\n  ours:    {:?}",
                        seen[0], seen[1]
                    ));
                }
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// From HTTPS to HTTP (another scheme, so another origin), with every
/// redirect status and from every source: the HTTP hop receives what it
/// receives from reqwest alone.
#[tokio::test]
async fn credentials_stay_behind_on_the_way_from_https_to_http() {
    use support::tls_server::{tls_redirecting, trusting_builder};

    let b = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&b).await;
    let mut differences = Vec::new();
    for status in [301, 302, 303, 307, 308] {
        let a = tls_redirecting(status, format!("{}/{status}", b.uri())).await;
        for source in Source::ALL {
            let mut seen = Vec::new();
            let plain = {
                let client = source.on(trusting_builder().no_proxy(), &a).build().unwrap();
                let builder = reqwest_middleware::ClientBuilder::new(client);
                if source == Source::Inner { builder.with(Token).build() } else { builder.build() }
            };
            let ours = {
                let retry = RetryMiddleware::default().with_clock(ManualClock::new());
                let builder = retry.client(source.on(trusting_builder().no_proxy(), &a)).unwrap();
                if source == Source::Inner { builder.with(Token).build() } else { builder.build() }
            };
            for client in [plain, ours] {
                let before = b.received_requests().await.unwrap().len();
                let call = source.request(&client, &format!("{a}/start")).send();
                let response = tokio::time::timeout(BOUND, call).await.unwrap().unwrap();
                assert_eq!(response.status(), 200, "{status} {source:?}");
                let received = b.received_requests().await.unwrap();
                let hop = &received[before..];
                assert_eq!(hop.len(), 1, "{status} {source:?}");
                assert!(!hop[0].headers.contains_key("referer"), "no Referer from HTTPS to HTTP");
                seen.push(sensitive(&hop[0].headers));
            }
            // Only a cookie the store keeps for the host may go on.
            let headers_only = source != Source::Jar;
            assert!(!headers_only || seen[1].is_empty(), "{status} {source:?}: {:?}", seen[1]);
            if seen[0] != seen[1] {
                differences.push(format!(
                    "{status} {source:?}: reqwest {:?}, ours {:?}",
                    seen[0], seen[1]
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// What the side-by-side test allows and the docs say: reqwest drops a
/// request's credentials on the hop to another origin, but builds every hop
/// from the original request's headers, so a second hop within that origin
/// (A → B → B) gets them back. The middleware changes nothing of it.
#[tokio::test]
async fn a_second_hop_within_another_origin_gets_the_credentials_as_with_reqwest() {
    let chains = Chains::start().await;
    for client in [plain(Source::Request, &chains.a.uri()), ours(Source::Request, &chains.a.uri())]
    {
        let (url, prefix) = chains.url(302, "ABB");
        Source::Request.request(&client, &url).send().await.unwrap();
        let arrivals = chains.arrivals(&prefix).await;
        let carries = |hop: &str| {
            arrivals.iter().any(|(_, h, headers)| {
                h == hop && headers.iter().any(|(n, _)| n == "authorization")
            })
        };
        assert_eq!((carries("0"), carries("1"), carries("2")), (true, false, true), "{arrivals:?}");
    }
}

/// A 303 turns a keyed POST into a GET that reqwest sends with the key: it
/// is carried, as reqwest carries it, and harmless on a GET.
#[tokio::test]
async fn the_key_is_carried_on_a_303s_get_as_reqwest_carries_it() {
    let chains = Chains::start().await;
    for client in [plain(Source::Jar, &chains.a.uri()), ours(Source::Jar, &chains.a.uri())] {
        let (url, prefix) = chains.url(303, "AB");
        client.post(&url).header("Idempotency-Key", "k-1").body("x").send().await.unwrap();
        let at_b = chains.b.received_requests().await.unwrap();
        let hop = at_b.iter().find(|r| r.url.path().starts_with(&prefix)).unwrap();
        assert_eq!(
            (hop.method.as_str(), &hop.headers["idempotency-key"]),
            ("GET", &HeaderValue::from_static("k-1"))
        );
    }
}
