//! Redirects: followed by reqwest, seen by the middleware.
//!
//! # Why reqwest follows them
//!
//! A redirect is where reqwest keeps promises a middleware cannot see:
//! default headers and cookies are added inside the client; a credential
//! (`Authorization`, `Cookie`, `Cookie2`, `Proxy-Authorization`,
//! `WWW-Authenticate`) is dropped when a hop leaves the scheme, host and port;
//! the builder's `referer`, `https_only` and redirect policy apply to every
//! hop; a request's timeout bounds the whole chain. A middleware that sent
//! each hop through the client again would undo the first of these (the
//! client adds its default headers back to every hop, and a middleware
//! inside the retry layer adds its token again) and would have to copy the
//! rest by hand. So the client follows every hop, as it does without this
//! crate, and the middleware only needs to *know* that it did.
//!
//! # Why the middleware must know
//!
//! The rules that repeat a request that is not safe to repeat (a 429, a
//! connection never made, an HTTP/2 stream refused) hold only when the
//! outcome is that request's own. A POST answered `303 See Other` has been
//! processed; a 429 from the page it leads to says nothing about the POST,
//! and the page may be the very URL that was POSTed, so comparing URLs
//! cannot tell. [`RetryMiddleware::client`](crate::RetryMiddleware::client)
//! builds the client with a redirect policy of the crate's that wraps the
//! user's: before the user's policy decides, it notes the redirect in a
//! task-local record that the middleware scopes around each attempt. An
//! attempt that met a redirect was answered, so the any-method rules do not
//! apply to it. A middleware that did not build its client cannot know what
//! the client follows, and applies the any-method rules only to requests that
//! are safe to repeat anyway: misuse loses retries, never safety.
//!
//! The record is shared by every layer of one call: a retry or hedge layer
//! inside another adds what it saw to the record of the layer outside, so
//! no layer can miss a redirect that one inside it saw.
//!
//! The record is a thread-local cell that each attempt's future swaps its
//! own count into while it is polled and out again after: the policy runs
//! inside that poll (tower-http's `FollowRedirect` decides in the response
//! future), so it notes the redirect for the call being polled, and calls
//! interleaved on one thread never see each other's. (`tokio::task_local!`
//! would do the same, at a cost on every call that BENCHMARKS.md gives.)
//!
//! # An `Idempotency-Key` across origins
//!
//! A key makes a repeat safe where the server that receives it deduplicates.
//! The key a caller sets was chosen for the origin it calls. A 307 or 308 to
//! another origin (or a 301 or 302, for any method but POST) sends the method
//! and body there, and reqwest sends the key along; nothing says that
//! origin honours it. So after such a hop a request that is safe only by its
//! key is no longer retried (nor hedged again). A 303, and a 301 or 302 of a
//! POST, turn the next hop into a GET: repeating the call repeats the POST at
//! the origin that knows the key, and the key reqwest carries on the GET is
//! harmless.
//!
//! A client the middleware did not build records nothing, so there the
//! middleware goes by the answer's URL: a response from another origin than
//! the request's came through a redirect, and takes the key's safety away
//! whatever the redirect was (a 303 cannot be told from a 307 there). An
//! error is named by the request's own URL, as reqwest names every error,
//! so one met at another origin is not seen.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::StatusCode;
use reqwest::Url;
use reqwest::redirect::Policy;

thread_local! {
    /// The redirects met by the attempt being polled on this thread.
    static SEEN: Cell<Seen> = const { Cell::new(Seen::NONE) };
}

/// The redirects one attempt (or one call) met, as the crate's redirect
/// policy recorded them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Redirects the client's policy was asked about: each is a server's
    /// answer to the request, so the request was processed.
    pub(crate) asked: u32,
    /// Of those, 307 and 308 redirects to another origin than the call's:
    /// method and body went on there.
    kept_body_away: u32,
    /// Of those, 301 and 302 redirects to another origin: method and body
    /// went on there unless the method was POST, which became a GET.
    moved_away: u32,
}

impl Seen {
    /// No redirect.
    pub(crate) const NONE: Self = Self { asked: 0, kept_body_away: 0, moved_away: 0 };

    /// Notes one redirect from the chain that started at `first`, with
    /// `status`, to `next`.
    fn note(&mut self, status: StatusCode, next: &Url, first: Option<&Url>) {
        self.asked = self.asked.saturating_add(1);
        if first.is_some_and(|first| same_origin(first, next)) {
            return;
        }
        match status {
            StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => {
                self.kept_body_away = self.kept_body_away.saturating_add(1);
            }
            StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => {
                self.moved_away = self.moved_away.saturating_add(1);
            }
            _ => {}
        }
    }

    /// What was recorded since `before`.
    fn since(self, before: Self) -> Self {
        Self {
            asked: self.asked.saturating_sub(before.asked),
            kept_body_away: self.kept_body_away.saturating_sub(before.kept_body_away),
            moved_away: self.moved_away.saturating_sub(before.moved_away),
        }
    }

    /// Both records together.
    fn plus(self, other: Self) -> Self {
        Self {
            asked: self.asked.saturating_add(other.asked),
            kept_body_away: self.kept_body_away.saturating_add(other.kept_body_away),
            moved_away: self.moved_away.saturating_add(other.moved_away),
        }
    }

    /// Whether a request (a POST, or not) went on, method and body, to
    /// another origin than the one its idempotency key was set for.
    pub(crate) fn took_away(self, post: bool) -> bool {
        self.kept_body_away > 0 || (self.moved_away > 0 && !post)
    }

    /// The redirects followed, of those noted, for an attempt whose chain
    /// `stopped` at the last one, which the caller then gets (a redirect
    /// response the policy left alone, or the error it chose): all of them
    /// otherwise.
    pub(crate) fn followed(self, stopped: bool) -> u32 {
        self.asked.saturating_sub(u32::from(stopped))
    }
}

/// The statuses reqwest follows.
pub(crate) fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Scheme, host and port: where reqwest draws its credential boundary.
pub(crate) fn same_origin(a: &Url, b: &Url) -> bool {
    (a.scheme(), a.host_str(), a.port_or_known_default())
        == (b.scheme(), b.host_str(), b.port_or_known_default())
}

/// The client's redirect policy: `user`'s decision, each redirect noted for
/// the attempt being polled first. Outside the middleware's attempts it
/// notes into a cell nobody reads.
pub(crate) fn policy(user: Arc<Policy>) -> Policy {
    Policy::custom(move |attempt| {
        let _ = SEEN.try_with(|seen| {
            let mut now = seen.get();
            now.note(attempt.status(), attempt.url(), attempt.previous().first());
            seen.set(now);
        });
        user.redirect(attempt)
    })
}

/// Whether `builder` has a redirect policy other than reqwest's default,
/// which [`policy`] would replace. reqwest has no getter for it; its
/// builder's `Debug` names the policy only when it is not the default (a
/// test pins that).
pub(crate) fn has_own_policy(builder: &reqwest::ClientBuilder) -> bool {
    let debug = format!("{builder:?}");
    ["{ redirect_policy: Policy(", ", redirect_policy: Policy("]
        .iter()
        .any(|field| debug.contains(field))
}

/// Runs `attempt`, and adds the redirects noted while it ran to `seen`.
/// What it notes goes to the record of any attempt this one runs inside
/// too (another layer of the crate outside this one).
pub(crate) async fn recorded<F: Future>(attempt: F, seen: &mut Seen) -> F::Output {
    let mut attempt = pin!(attempt);
    poll_fn(|cx| poll_recorded(attempt.as_mut(), cx, seen)).await
}

/// Polls `attempt` with `seen` swapped in as the record of the attempt
/// being polled, and what it noted added to the record outside. (A panic
/// in the attempt leaves the cell holding its count; the cell is read only
/// inside an attempt, which swaps its own in first.)
fn poll_recorded<F: Future>(
    attempt: Pin<&mut F>,
    cx: &mut Context<'_>,
    seen: &mut Seen,
) -> Poll<F::Output> {
    let outer = SEEN.replace(*seen);
    let polled = attempt.poll(cx);
    let mine = SEEN.replace(outer);
    SEEN.set(outer.plus(mine.since(*seen)));
    *seen = mine;
    polled
}

/// The redirects noted so far by the attempt being polled.
pub(crate) fn so_far() -> Seen {
    SEEN.get()
}

#[cfg(test)]
mod tests {
    use http::header::LOCATION;
    use reqwest::Response;
    use reqwest_middleware::Result;

    use super::*;
    use crate::exchange::Exchange;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn seen(hops: &[(u16, &str)]) -> Seen {
        let first = url("https://a.test/orders");
        let mut seen = Seen::default();
        for (status, next) in hops {
            seen.note(StatusCode::from_u16(*status).unwrap(), &url(next), Some(&first));
        }
        seen
    }

    fn followed(seen: Seen, outcome: &Result<Response>) -> u32 {
        seen.followed(crate::exchange::Reqwest::stopped_at_redirect(outcome))
    }

    fn redirect(status: u16, location: Option<&str>) -> Result<Response> {
        let mut response = http::Response::builder().status(status);
        if let Some(location) = location {
            response = response.header(LOCATION, location);
        }
        Ok(response.body("").unwrap().into())
    }

    #[test]
    fn every_redirect_counts_as_an_answer() {
        let seen = seen(&[(303, "https://a.test/x"), (302, "https://a.test/y")]);
        assert_eq!(seen.asked, 2);
        assert!(!seen.took_away(false), "the chain stayed on its origin");
    }

    #[test]
    fn a_body_kept_on_the_way_to_another_origin_takes_the_key_away() {
        for status in [307, 308] {
            for next in ["https://b.test/x", "http://a.test/x", "https://a.test:8443/x"] {
                let seen = seen(&[(status, next)]);
                assert!(seen.took_away(true), "{status} to {next}");
            }
            assert!(!seen(&[(status, "https://a.test/x")]).took_away(true));
        }
        // 301 and 302 turn only a POST into a GET.
        for status in [301, 302] {
            let seen = seen(&[(status, "https://b.test/x")]);
            assert!(!seen.took_away(true), "{status}: the POST became a GET");
            assert!(seen.took_away(false), "{status}: a PATCH keeps its body");
        }
        // A 303 turns anything into a GET.
        assert!(!seen(&[(303, "https://b.test/x")]).took_away(false));
        // Back on the first origin, the hop that went away still counts.
        let back = seen(&[(307, "https://b.test/x"), (307, "https://a.test/orders")]);
        assert!(back.took_away(true));
    }

    #[test]
    fn since_counts_only_what_came_after() {
        let before = seen(&[(307, "https://b.test/x")]);
        let after = seen(&[
            (307, "https://b.test/x"),
            (302, "https://c.test/x"),
            (303, "https://a.test/y"),
        ]);
        let later = after.since(before);
        assert_eq!(later.asked, 1 + 1);
        assert!(!later.took_away(true), "the 307 came before");
        assert!(later.took_away(false), "the 302 came after");
        assert_eq!(before.since(after), Seen::default(), "never below zero");
    }

    #[test]
    fn a_chain_that_stopped_at_a_redirect_did_not_follow_it() {
        let two = seen(&[(302, "https://a.test/x"), (302, "https://a.test/y")]);
        assert_eq!(followed(two, &Ok(http::Response::new("").into())), 2);
        assert_eq!(followed(two, &redirect(302, Some("/z"))), 1, "the policy stopped");
        assert_eq!(followed(two, &redirect(302, None)), 2, "nothing to follow, nothing asked");
        assert_eq!(followed(two, &redirect(304, Some("/z"))), 2, "304 is no redirect");
        let other = reqwest_middleware::Error::middleware(std::fmt::Error);
        assert_eq!(followed(two, &Err(other)), 2);
        assert_eq!(followed(Seen::default(), &redirect(302, Some("/z"))), 0);
    }

    #[test]
    fn a_builders_own_redirect_policy_is_seen() {
        let builder = reqwest::Client::builder;
        assert!(!has_own_policy(&builder()));
        assert!(!has_own_policy(&builder().redirect(Policy::default())), "the default is no loss");
        for own in [Policy::none(), Policy::limited(2), Policy::custom(|a| a.stop())] {
            assert!(has_own_policy(&builder().redirect(own)));
        }
        // Other settings, and a header that names the field, are not a policy.
        let value = http::HeaderValue::from_static("redirect_policy: Policy(Limit(2))");
        let headers = [(http::header::ACCEPT, value)].into_iter().collect();
        let others = builder().referer(false).https_only(true).default_headers(headers);
        assert!(!has_own_policy(&others));
    }

    fn note() {
        SEEN.with(|seen| {
            let mut now = seen.get();
            now.note(StatusCode::FOUND, &url("https://a.test/x"), None);
            seen.set(now);
        })
    }

    #[tokio::test]
    async fn a_record_inside_another_adds_to_it() {
        let (mut inner, mut outer) = (Seen::NONE, Seen::NONE);
        let outer_during = recorded(
            async {
                note();
                recorded(async { note() }, &mut inner).await;
                so_far()
            },
            &mut outer,
        )
        .await;
        assert_eq!(inner.asked, 1, "the inner layer sees its own redirect");
        assert_eq!(outer_during.asked, 2);
        assert_eq!(outer.asked, 2, "the outer layer sees both");
    }

    #[tokio::test]
    async fn attempts_polled_in_turn_on_one_thread_keep_their_own_records() {
        let (mut first, mut second) = (Seen::NONE, Seen::NONE);
        let one = recorded(
            async {
                note();
                tokio::task::yield_now().await;
                note();
            },
            &mut first,
        );
        let other = recorded(
            async {
                tokio::task::yield_now().await;
                note();
            },
            &mut second,
        );
        tokio::join!(one, other);
        assert_eq!((first.asked, second.asked), (2, 1));
    }
}
