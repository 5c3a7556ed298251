//! HTTP negotiation for stored pages: what a client asked for (`HEAD`, gzip,
//! `If-None-Match`), which responses may be stored, and building the response for
//! a stored page as the client asked for it.

use crate::StoredPage;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use shop_cache::CacheError;

/// What the client asked for that decides how a stored page is sent.
#[derive(Clone)]
pub(crate) struct Ask {
    head: bool,
    gzip: bool,
    if_none_match: Option<HeaderValue>,
}

impl Ask {
    pub(crate) fn of(req: &Request) -> Self {
        Self {
            head: req.method() == Method::HEAD,
            gzip: accepts_gzip(req.headers()),
            if_none_match: req.headers().get(header::IF_NONE_MATCH).cloned(),
        }
    }
}

/// May this response be stored and shown to everyone?
pub(crate) fn storable(resp: &Response) -> bool {
    let h = resp.headers();
    resp.status() == StatusCode::OK
        && !h.contains_key(header::SET_COOKIE)
        && !h.contains_key(header::CONTENT_ENCODING)
        && !h.get_all(header::CACHE_CONTROL).iter().any(|v| {
            v.to_str().unwrap_or("").split(',').any(|d| {
                let d = d.trim();
                ["private", "no-store", "no-cache"].iter().any(|bad| {
                    d.eq_ignore_ascii_case(bad)
                        || d.to_ascii_lowercase().starts_with(&format!("{bad}="))
                })
            })
        })
}

/// Does `Accept-Encoding` allow gzip (`gzip`, `x-gzip` or `*`, with q > 0)?
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            !q_zero
                && ["gzip", "x-gzip", "*"]
                    .iter()
                    .any(|g| name.eq_ignore_ascii_case(g))
        })
}

/// The ETag of the gzip form of a page whose ETag is `etag`: `-gzip` inside
/// the quotes. Two forms of a page are two representations, and a strong ETag
/// names one (RFC 9110 8.8.3): with one ETag for both, a cache holding only the
/// gzip form could revalidate it for a client that accepts no gzip, get a 304,
/// and send that client bytes it cannot read.
fn gzip_etag(etag: &str) -> String {
    match etag.strip_suffix('"') {
        Some(open) => format!("{open}-gzip\""),
        None => format!("{etag}-gzip"),
    }
}

/// Does `If-None-Match` name this ETag (weak comparison, or `*`)?
fn etag_matches(if_none_match: &HeaderValue, etag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    let etag = strip(etag);
    if_none_match
        .to_str()
        .unwrap_or("")
        .split(',')
        .any(|t| t.trim() == "*" || strip(t) == etag)
}

/// Builds the response for a stored page as the client asked for it.
pub(crate) fn serve(page: &StoredPage, ask: &Ask) -> Result<Response, CacheError> {
    Prepared::of(page, !ask.gzip)?.respond(ask)
}

/// A stored page made ready to send: its headers built once, its body in the
/// forms clients ask for (gzip as stored; decompressed, when asked to keep it).
/// What the in-process tier holds, so a hit there parses and decompresses nothing.
#[derive(Debug)]
pub(crate) struct Prepared {
    status: StatusCode,
    /// Every header but the ETag, which is the form's.
    headers: HeaderMap,
    /// The ETag of the body as stored when sent decompressed, and of the gzip
    /// form ([`gzip_etag`]), made once: a hit clones one (a reference count).
    etag: HeaderValue,
    etag_gzip: HeaderValue,
    gzip: Bytes,
    identity: Option<Bytes>,
}

impl Prepared {
    /// `page` ready to send; with `identity`, its body decompressed too.
    pub(crate) fn of(page: &StoredPage, identity: bool) -> Result<Self, CacheError> {
        let mut headers = HeaderMap::new();
        let mut vary = String::new();
        for (name, value) in page.headers() {
            let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::from_bytes(value),
            ) else {
                return Err(CacheError::Corrupt { what: "cache:" });
            };
            if name == header::VARY {
                vary = format!("{}, ", value.to_str().unwrap_or(""));
            } else {
                headers.append(name, value);
            }
        }
        let vary = HeaderValue::try_from(format!("{vary}Accept-Encoding"))
            .map_err(|_| CacheError::Corrupt { what: "cache:" })?;
        headers.insert(header::VARY, vary);
        let header_value = |etag: &str| {
            HeaderValue::from_str(etag).map_err(|_| CacheError::Corrupt { what: "cache:" })
        };
        Ok(Self {
            status: status_of(page)?,
            headers,
            etag: header_value(page.etag())?,
            etag_gzip: header_value(&gzip_etag(page.etag()))?,
            gzip: page.gzip_body(),
            identity: if identity {
                Some(Bytes::from(page.body()?))
            } else {
                None
            },
        })
    }

    /// The bytes it holds, for a cache bounded in bytes.
    pub(crate) fn weight(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 32)
            .sum();
        self.gzip.len()
            + self.identity.as_ref().map_or(0, Bytes::len)
            + headers
            + self.etag.len()
            + self.etag_gzip.len()
            + 128
    }

    /// The response, as `ask` wants it.
    pub(crate) fn respond(&self, ask: &Ask) -> Result<Response, CacheError> {
        let mut headers = self.headers.clone();
        let etag = if ask.gzip {
            &self.etag_gzip
        } else {
            &self.etag
        };
        headers.insert(header::ETAG, etag.clone());
        let not_modified = ask
            .if_none_match
            .as_ref()
            .is_some_and(|inm| etag_matches(inm, etag.to_str().unwrap_or("")));
        let (status, body) = if not_modified {
            (StatusCode::NOT_MODIFIED, Bytes::new())
        } else if ask.gzip {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            (self.status, self.gzip.clone())
        } else {
            let identity = self
                .identity
                .clone()
                .ok_or(CacheError::Corrupt { what: "cache:" })?;
            (self.status, identity)
        };
        if !not_modified {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let body = if ask.head {
            Body::empty()
        } else {
            Body::from(body)
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        Ok(resp)
    }
}

/// A rendered page's body, read whole to be kept or given an ETag.
pub(crate) enum Whole {
    /// Read, within the bound.
    Read(Bytes),
    /// Longer than the bound, or of unknown length: unread, to be sent as it is.
    TooLong(Body),
    /// Reading it failed (logged): the 500 to send instead.
    Failed(Response),
}

/// Reads `body` whole when its length is known to be within `max_body`.
pub(crate) async fn read_whole(body: Body, max_body: usize) -> Whole {
    use http_body::Body as _;
    if body.size_hint().upper().is_none_or(|n| n > max_body as u64) {
        return Whole::TooLong(body);
    }
    match axum::body::to_bytes(body, max_body).await {
        Ok(bytes) => Whole::Read(bytes),
        Err(error) => {
            tracing::error!(%error, "reading a page body failed");
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            Whole::Failed(resp)
        }
    }
}

/// A page rendered for this request alone (one the cache does not keep), with
/// the ETag a stored copy of it would have, and `304 Not Modified` for a client
/// that holds these bytes already: such a page revalidates like a kept one.
/// The body is read as [`fill`](super) reads one, within `max_body`.
/// A page too long for that, or of unknown length, is sent as it is.
pub(crate) async fn with_etag(resp: Response, ask: &Ask, max_body: usize) -> Response {
    let (mut parts, body) = resp.into_parts();
    let bytes = match read_whole(body, max_body).await {
        Whole::Read(bytes) => bytes,
        Whole::TooLong(body) => return Response::from_parts(parts, body),
        Whole::Failed(resp) => return resp,
    };
    let etag = match parts.headers.get(header::ETAG) {
        Some(etag) => etag.clone(),
        None => match HeaderValue::try_from(crate::stored::body_etag(&bytes)) {
            Ok(etag) => etag,
            Err(_) => return Response::from_parts(parts, Body::from(bytes)),
        },
    };
    let not_modified = ask
        .if_none_match
        .as_ref()
        .is_some_and(|inm| etag_matches(inm, etag.to_str().unwrap_or("")));
    parts.headers.insert(header::ETAG, etag);
    if not_modified {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    }
    Response::from_parts(parts, Body::from(bytes))
}

fn status_of(page: &StoredPage) -> Result<StatusCode, CacheError> {
    StatusCode::from_u16(page.status()).map_err(|_| CacheError::Corrupt { what: "cache:" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::try_from(*k).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn gzip_acceptance() {
        let yes = [
            "gzip",
            "gzip, deflate, br",
            "br;q=1.0, gzip;q=0.8",
            "GZIP",
            "*",
            "x-gzip",
        ];
        for v in yes {
            assert!(accepts_gzip(&headers(&[("accept-encoding", v)])), "{v}");
        }
        let no = ["", "br", "identity", "gzip;q=0", "gzip; q=0.0, br"];
        for v in no {
            assert!(!accepts_gzip(&headers(&[("accept-encoding", v)])), "{v}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn the_gzip_form_has_its_own_etag() {
        assert_eq!(gzip_etag("\"abc\""), "\"abc-gzip\"");
        assert_eq!(gzip_etag("W/\"abc\""), "W/\"abc-gzip\"");
        let m = |inm: &str| etag_matches(&HeaderValue::from_str(inm).unwrap(), "\"abc-gzip\"");
        assert!(m("\"abc-gzip\""));
        assert!(!m("\"abc\""), "the other form's ETag is not this one's");
    }

    #[test]
    fn etag_matching() {
        let m = |inm: &str| etag_matches(&HeaderValue::from_str(inm).unwrap(), "\"abc\"");
        assert!(m("\"abc\""));
        assert!(m("W/\"abc\""));
        assert!(m("\"x\", \"abc\""));
        assert!(m("*"));
        assert!(!m("\"abcd\""));
        assert!(!m("abc"));
    }

    #[test]
    fn storability() {
        let resp = |status: u16, pairs: &[(&str, &str)]| {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::from_u16(status).unwrap();
            *r.headers_mut() = headers(pairs);
            r
        };
        assert!(storable(&resp(200, &[])));
        assert!(storable(&resp(
            200,
            &[("cache-control", "public, max-age=60")]
        )));
        assert!(!storable(&resp(404, &[])));
        assert!(!storable(&resp(302, &[])));
        assert!(!storable(&resp(200, &[("set-cookie", "a=b")])));
        assert!(!storable(&resp(200, &[("cache-control", "Private")])));
        assert!(!storable(&resp(
            200,
            &[("cache-control", "max-age=0, no-store")]
        )));
        assert!(!storable(&resp(200, &[("cache-control", "private=\"x\"")])));
        assert!(!storable(&resp(200, &[("content-encoding", "br")])));
    }
}
