//! A host as a fleet names it in its store, and the key that keeps its
//! name from the store.

use std::fmt;

use crate::hosts::{Located, Origin};

/// A host as a fleet names it in its store: `scheme://name:port`, the port
/// written even when it is the scheme's default, so that every process
/// names a host alike; or, for a fleet that keeps host names from its
/// store ([`Fleet::with_hashed_hosts`]), a keyed hash of that.
///
/// [`Fleet::with_hashed_hosts`]: super::Fleet::with_hashed_hosts
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FleetHost {
    /// The name in the store.
    name: String,
    /// `scheme://name:port`, as this process calls the host.
    local: String,
    /// Its scheme, name and port (none for the scheme's default), as the
    /// books key it.
    scheme: Box<str>,
    host: Box<str>,
    port: Option<u16>,
}

impl FleetHost {
    /// The host of `scheme`, `name` (as `Url` writes it) and `port` (none
    /// for the scheme's default), its name hashed under `key` if given.
    pub(crate) fn new(scheme: &str, name: &str, port: Option<u16>, key: Option<&HostKey>) -> Self {
        let (host, keyed) = (name.into(), port.filter(|&port| Some(port) != special_port(scheme)));
        let port = port.or_else(|| default_port(scheme));
        let local = match port {
            Some(port) => format!("{scheme}://{name}:{port}"),
            None => format!("{scheme}://{name}"),
        };
        let name = match key {
            Some(key) => key.hash(&local),
            None => local.clone(),
        };
        Self { name, local, scheme: scheme.into(), host, port: keyed }
    }

    /// The name in the store: `scheme://name:port`, or its hash.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

/// The host as the books key it, to find its entry by.
impl Located for FleetHost {
    fn as_origin(&self) -> Origin<'_> {
        Origin::new(&self.scheme, &self.host, self.port)
    }
}

/// As the process calls the host, `scheme://name:port`, whatever the store
/// holds: for its own events.
impl fmt::Display for FleetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.local)
    }
}

/// The key a fleet hashes its host names under.
#[derive(Clone)]
pub(crate) struct HostKey(pub(super) [u8; 16]);

impl HostKey {
    /// `host:` and the 128 bits of SipHash-2-4 of `local` under the key,
    /// in hex.
    pub(super) fn hash(&self, local: &str) -> String {
        use siphasher::sip128::Hasher128;
        use std::hash::Hasher;
        let mut hasher = siphasher::sip128::SipHasher24::new_with_key(&self.0);
        hasher.write(local.as_bytes());
        format!("host:{:032x}", hasher.finish128().as_u128())
    }
}

/// The port a URL of `scheme` leaves out, as reqwest's `Url` does for the
/// special schemes: the books key a host by the port its URL names.
fn special_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        "ftp" => Some(21),
        _ => None,
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}
