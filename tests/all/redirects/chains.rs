//! Chains of redirect hops on loopback that record which credentials each
//! hop received, for the tests of what reaches which hop.

use std::sync::atomic::{AtomicUsize, Ordering};

use http::HeaderMap;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The headers reqwest keeps from another origin.
pub(super) const SENSITIVE: [&str; 5] =
    ["authorization", "cookie", "cookie2", "proxy-authorization", "www-authenticate"];

/// Two servers on loopback, `A` and `B` (another port, so another origin).
/// A request to `/{status}/{chain}/{run}/{i}` is hop `i` of `chain` (a
/// string of `A`s and `B`s): it is answered with `status` and a `Location`
/// to hop `i + 1` on its server, or 200 at the last hop.
pub(super) struct Chains {
    pub(super) a: MockServer,
    pub(super) b: MockServer,
    run: AtomicUsize,
}

pub(super) struct Hop {
    a: String,
    b: String,
    status: u16,
}

impl Respond for Hop {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let parts: Vec<&str> = request.url.path().trim_start_matches('/').split('/').collect();
        let [status, chain, run, i] = parts[..] else { return ResponseTemplate::new(404) };
        let (Ok(i), Ok(code)) = (i.parse::<usize>(), status.parse::<u16>()) else {
            return ResponseTemplate::new(404);
        };
        if code != self.status {
            return ResponseTemplate::new(404);
        }
        match chain.as_bytes().get(i + 1) {
            None => ResponseTemplate::new(200),
            Some(next) => {
                let base = if *next == b'A' { &self.a } else { &self.b };
                let location = format!("{base}/{status}/{chain}/{run}/{}", i + 1);
                ResponseTemplate::new(self.status).insert_header("Location", location.as_str())
            }
        }
    }
}

impl Chains {
    pub(super) async fn start() -> Self {
        let (a, b) = (MockServer::start().await, MockServer::start().await);
        for status in [301, 302, 303, 307, 308] {
            for server in [&a, &b] {
                let hop = Hop { a: a.uri(), b: b.uri(), status };
                Mock::given(wiremock::matchers::path_regex(format!("^/{status}/")))
                    .respond_with(hop)
                    .mount(server)
                    .await;
            }
        }
        Chains { a, b, run: AtomicUsize::new(0) }
    }

    /// The first URL of a new run of `chain` with `status`.
    pub(super) fn url(&self, status: u16, chain: &str) -> (String, String) {
        let run = self.run.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("/{status}/{chain}/{run}/");
        (format!("{}{prefix}0", self.a.uri()), prefix)
    }

    /// What arrived for the run under `prefix`, hop by hop: the server, the
    /// hop and the sensitive headers with their values.
    pub(super) async fn arrivals(
        &self,
        prefix: &str,
    ) -> Vec<(char, String, Vec<(String, String)>)> {
        let mut arrivals = Vec::new();
        for (name, server) in [('A', &self.a), ('B', &self.b)] {
            for request in server.received_requests().await.unwrap() {
                let Some(hop) = request.url.path().strip_prefix(prefix) else { continue };
                arrivals.push((name, hop.to_owned(), sensitive(&request.headers)));
            }
        }
        arrivals.sort();
        arrivals
    }
}

pub(super) fn sensitive(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = SENSITIVE
        .iter()
        .flat_map(|name| {
            headers
                .get_all(*name)
                .iter()
                .map(|v| (name.to_string(), v.to_str().unwrap().to_owned()))
        })
        .collect();
    found.sort();
    found
}
