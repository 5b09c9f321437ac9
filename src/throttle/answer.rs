//! How the answer to an attempt counts for its host's throttle.

use http::StatusCode;

use crate::classify::Failure;
use crate::config::RetryConfig;
use crate::head::Head;

/// How an attempt's outcome counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Accepted,
    Rejected,
}

/// How the answer to an attempt counts, by its head or by what its failure
/// says: `429`, `502`, `503` and `504` (and a `403` the settings take as a
/// `429`), a refused or unreachable connection, a refused stream and a
/// timeout are rejections; every other response is accepted; other
/// failures count as neither.
#[inline]
pub(crate) fn answer(config: &RetryConfig, seen: Result<Head<'_>, Failure>) -> Option<Answer> {
    match seen {
        Ok(head) if head.status.is_success() => Some(Answer::Accepted),
        Ok(Head { status, headers }) => {
            let rejected = matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS
                    | StatusCode::BAD_GATEWAY
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::GATEWAY_TIMEOUT
            ) || config.retry_after.takes_as_429(status, headers);
            Some(if rejected { Answer::Rejected } else { Answer::Accepted })
        }
        Err(Failure::NeverReached | Failure::RefusedStream | Failure::Timeout) => {
            Some(Answer::Rejected)
        }
        Err(Failure::NotSent | Failure::ConnectionLost | Failure::Final) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut builder = http::Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Vec::new()).unwrap().into()
    }

    #[test]
    fn answers_count_as_the_throttle_says() {
        let config = RetryConfig::default();
        let counted = |status| answer(&config, Ok(Head::of(&response(status, &[]))));
        for status in [429, 502, 503, 504] {
            assert_eq!(counted(status), Some(Answer::Rejected), "{status}");
        }
        for status in [200, 204, 301, 404, 403, 500, 501] {
            assert_eq!(counted(status), Some(Answer::Accepted), "{status}");
        }
        // A 403 the settings take as a 429.
        let limits = RetryConfig::builder()
            .with_retry_after(crate::RetryAfter::default().with_rate_limit_headers(true))
            .build()
            .unwrap();
        let limited = response(403, &[("retry-after", "5")]);
        assert_eq!(answer(&limits, Ok(Head::of(&limited))), Some(Answer::Rejected));
        let forbidden = response(403, &[]);
        assert_eq!(answer(&limits, Ok(Head::of(&forbidden))), Some(Answer::Accepted));
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_rejection_and_another_error_is_neither() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let error = reqwest::Client::new().get(&url).send().await.unwrap_err();
        let url = reqwest::Url::parse(&url).unwrap();
        let refused = reqwest_middleware::Error::Reqwest(error);
        let refused = crate::classify::failure_of(&refused, Some(&url));
        assert_eq!(answer(&RetryConfig::default(), Err(refused)), Some(Answer::Rejected));
        let other = reqwest_middleware::Error::middleware(std::fmt::Error);
        let other = crate::classify::failure_of(&other, Some(&url));
        assert_eq!(answer(&RetryConfig::default(), Err(other)), None);
    }
}
