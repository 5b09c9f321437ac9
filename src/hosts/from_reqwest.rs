//! reqwest's URLs, as the table of hosts keys them.

use super::{Located, Origin};

/// Its scheme, its host as `Url` writes it (lowercase) and the port it
/// names: `Url` leaves out a port that is its scheme's default.
impl Located for reqwest::Url {
    #[inline]
    fn as_origin(&self) -> Origin<'_> {
        Origin::new(self.scheme(), self.host_str().unwrap_or_default(), self.port())
    }
}
