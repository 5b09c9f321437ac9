//! Idempotency keys minted for the caller: one per call, for a request
//! that has none and is not already safe to repeat, so that a server which
//! deduplicates by the key can take it again.
//!
//! A key makes a repeat safe only where the server deduplicates by it
//! (Stripe, OpenAI, Adyen and PayPal do); the middleware cannot tell
//! whether a server does, and a server that ignores the key does the work
//! again. Mint keys only for servers that honour them.

use std::fmt;

use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method};
use rand::RngExt;

use crate::safety::{Safety, safety};

/// Asks the middleware to mint an idempotency key for this request, as
/// [`RetryConfigBuilder::with_minted_keys`](crate::RetryConfigBuilder::with_minted_keys)
/// does for every request (`RequestBuilder::with_extension`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MintKey;

/// An idempotency key the middleware minted for a call: a random UUID
/// (version 4: 122 random bits), written in its usual text form. The call's
/// `RetryReport` (`minted_key`) holds it, so a caller can
/// reconcile a call that ended in an error with what the server did.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MintedKey([u8; 16]);

impl MintedKey {
    /// A fresh key, from the thread's random source.
    fn new() -> Self {
        let mut bytes: [u8; 16] = rand::rng().random();
        // Version 4 in the high nibble of byte 6, the RFC 9562 variant in
        // the two high bits of byte 8.
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        Self(bytes)
    }

    /// The key's sixteen bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for MintedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, byte) in self.0.iter().enumerate() {
            if matches!(at, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for MintedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MintedKey({self})")
    }
}

/// Mints a key for a request, by its method and headers, and sets it as
/// its `header`, if minting is on
/// (`always`, or the request's [`MintKey`]), the request has no such header
/// (a caller's key, even a blank one, is never replaced) and it is not
/// already safe to repeat (an idempotent method or `SafeToRetry`), as the
/// retry rules ([`safety`]) say.
pub(crate) fn mint(
    always: bool,
    (method, headers): (&Method, &mut HeaderMap),
    extensions: &Extensions,
    header: &HeaderName,
) -> Option<MintedKey> {
    if !always && extensions.get::<MintKey>().is_none() {
        return None;
    }
    // A blank key makes no request safe, and is still never replaced.
    if safety((method, headers), extensions, header) != Safety::Unsafe
        || headers.contains_key(header)
    {
        return None;
    }
    let key = MintedKey::new();
    let value = HeaderValue::try_from(key.to_string()).ok()?;
    headers.insert(header.clone(), value);
    Some(key)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use reqwest::Request;

    use super::*;
    use crate::extensions::SafeToRetry;

    fn mint_in(
        always: bool,
        request: &mut Request,
        extensions: &Extensions,
        header: &HeaderName,
    ) -> Option<MintedKey> {
        let method = request.method().clone();
        mint(always, (&method, request.headers_mut()), extensions, header)
    }

    fn request(method: Method) -> Request {
        Request::new(method, "http://api.test/charges".parse().unwrap())
    }

    fn header() -> HeaderName {
        HeaderName::from_static("idempotency-key")
    }

    #[test]
    fn a_minted_key_is_a_version_4_uuid_and_each_is_new() {
        let keys: HashSet<String> = (0..1000).map(|_| MintedKey::new().to_string()).collect();
        assert_eq!(keys.len(), 1000);
        for key in &keys {
            let groups: Vec<usize> = key.split('-').map(str::len).collect();
            assert_eq!(groups, [8, 4, 4, 4, 12], "{key}");
            assert_eq!(&key[14..15], "4", "the version: {key}");
            assert!("89ab".contains(&key[19..20]), "the variant: {key}");
            assert!(key.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()), "{key}");
        }
    }

    #[test]
    fn a_key_is_minted_only_when_asked_for_a_request_with_none_that_is_not_safe() {
        let none = Extensions::new();
        let mut asked = Extensions::new();
        asked.insert(MintKey);
        let mut post = request(Method::POST);
        assert_eq!(mint_in(false, &mut post, &none, &header()), None, "not asked");
        let key = mint_in(false, &mut post, &asked, &header()).expect("asked by the request");
        assert_eq!(post.headers()["idempotency-key"], key.to_string().as_str());
        assert_eq!(mint_in(true, &mut post, &none, &header()), None, "a key is never replaced");
        assert_eq!(post.headers()["idempotency-key"], key.to_string().as_str());
        let mut blank = request(Method::PATCH);
        blank.headers_mut().insert(header(), HeaderValue::from_static(" "));
        assert_eq!(mint_in(true, &mut blank, &none, &header()), None, "nor a blank one");
        let mut put = request(Method::PUT);
        assert_eq!(mint_in(true, &mut put, &none, &header()), None, "safe by its method");
        assert!(put.headers().is_empty());
        let mut declared = Extensions::new();
        declared.insert(SafeToRetry);
        let mut post = request(Method::POST);
        assert_eq!(mint_in(true, &mut post, &declared, &header()), None, "declared safe");
        let mut other = request(Method::POST);
        let named = HeaderName::from_static("x-request-key");
        assert!(mint_in(true, &mut other, &none, &named).is_some());
        assert!(other.headers().contains_key("x-request-key"));
    }

    #[test]
    fn a_key_shows_as_its_text() {
        let key = MintedKey([0xab; 16]);
        assert_eq!(key.to_string(), "abababab-abab-abab-abab-abababababab");
        assert_eq!(format!("{key:?}"), "MintedKey(abababab-abab-abab-abab-abababababab)");
        assert_eq!(key.as_bytes(), &[0xab; 16]);
    }
}
