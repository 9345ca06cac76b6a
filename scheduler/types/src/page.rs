//! Paging a collection: `?limit=N&cursor=C` on every list route, answered with the page
//! and, when more follow, the next page's cursor (a `Link: <...>; rel="next"` header over
//! HTTP). A cursor is opaque to clients: the last key of the page, keyset-style, so a page
//! never skips or repeats a row because rows were inserted or deleted meanwhile. The store
//! reads `limit + 1` rows in key order after the cursor's key (`metal_store::page`); the
//! extra one only says that another page follows.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::error::ApiError;

/// The page size when a request names none.
pub const DEFAULT_LIMIT: u32 = 1000;
/// The largest page a request may ask for.
pub const MAX_LIMIT: u32 = 10_000;

/// What a cursor's text starts with once decoded: a version, so a cursor of another shape
/// (or made up) is refused rather than misread.
const CURSOR_TAG: &str = "k1:";

/// The paging parameters of a list route.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// At most this many items (1 to 10000; default 1000).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
    /// Where to go on: the cursor of the previous page's `Link: <...>; rel="next"` header.
    /// Opaque; absent for the first page.
    pub cursor: Option<String>,
}

/// A validated page request: how many, and after which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// At most this many items.
    pub limit: u32,
    /// Only items whose key sorts after this one (none: from the first).
    pub after: Option<String>,
}

impl Default for Page {
    fn default() -> Self {
        Page { limit: DEFAULT_LIMIT, after: None }
    }
}

impl PageQuery {
    /// The page this query asks for; a limit out of range or a cursor this service did not
    /// make is INVALID_INPUT naming the parameter.
    pub fn page(&self) -> Result<Page, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::invalid("limit", format!("must be 1 to {MAX_LIMIT} (got {limit})")));
        }
        let after = self.cursor.as_deref().map(decode_cursor).transpose()?;
        Ok(Page { limit, after })
    }
}

impl Page {
    /// How many rows the store reads: one more than the page, to learn whether more follow.
    pub fn fetch(&self) -> i64 {
        i64::from(self.limit).saturating_add(1)
    }
}

/// One page of a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paged<T> {
    /// The items, in key order.
    pub items: Vec<T>,
    /// The cursor of the next page, when there is one.
    pub next: Option<String>,
}

/// The opaque cursor of a key.
pub fn encode_cursor(key: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{CURSOR_TAG}{key}"))
}

fn decode_cursor(cursor: &str) -> Result<String, ApiError> {
    let refused = || ApiError::invalid("cursor", "not a cursor this service gave (take it from a page's Link header)");
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| refused())?;
    let text = String::from_utf8(bytes).map_err(|_| refused())?;
    text.strip_prefix(CURSOR_TAG).map(str::to_owned).ok_or_else(refused)
}

/// The `next` cursor of a `Link` header value (`<...?cursor=C...>; rel="next"`), for
/// clients following pages.
pub fn next_cursor(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        if !params.split(';').any(|p| p.trim() == "rel=\"next\"" || p.trim() == "rel=next") {
            return None;
        }
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let (_, query) = target.split_once('?')?;
        query.split('&').find_map(|pair| pair.strip_prefix("cursor=")).map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(limit: Option<u32>, cursor: Option<&str>) -> PageQuery {
        PageQuery { limit, cursor: cursor.map(str::to_owned) }
    }

    #[test]
    fn a_cursor_carries_the_key_it_was_made_from() {
        let page = query(Some(2), None).page().unwrap();
        assert_eq!((page.fetch(), page.after), (3, None));
        let next = query(Some(2), Some(&encode_cursor("[\"node-7\"]"))).page().unwrap();
        assert_eq!(next.after.as_deref(), Some("[\"node-7\"]"));
    }

    #[test]
    fn limits_out_of_range_and_foreign_cursors_are_refused_by_name() {
        for limit in [0, MAX_LIMIT + 1] {
            let error = query(Some(limit), None).page().unwrap_err();
            assert!(matches!(&error, ApiError::InvalidInput { field, .. } if field == "limit"), "{error}");
        }
        assert_eq!(query(None, None).page().unwrap().limit, DEFAULT_LIMIT);
        for cursor in ["node-1", "!!", &URL_SAFE_NO_PAD.encode("k2:x"), &URL_SAFE_NO_PAD.encode([0xff, 0xfe])] {
            let error = query(None, Some(cursor)).page().unwrap_err();
            assert!(matches!(&error, ApiError::InvalidInput { field, .. } if field == "cursor"), "{cursor}: {error}");
        }
    }

    #[test]
    fn the_next_cursor_is_read_back_from_a_link_header() {
        let cursor = encode_cursor("node-0042");
        let link = format!("</v1/nodes?state=ready&cursor={cursor}&limit=5>; rel=\"next\"");
        assert_eq!(next_cursor(&link), Some(cursor.clone()));
        assert_eq!(next_cursor(&format!("</x?cursor=a>; rel=\"prev\", </x?cursor={cursor}>; rel=next")), Some(cursor));
        assert_eq!(next_cursor("</v1/nodes?limit=5>; rel=\"next\""), None);
    }
}
