//! One keep-alive HTTP/1.1 connection to the shop.

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT_ENCODING, CONTENT_TYPE, COOKIE, HOST, SET_COOKIE};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

/// What the load generator keeps of a response.
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// `shop_session=<token>` if the response set the session cookie.
    pub session_cookie: Option<String>,
    /// The body (read fully, so the connection can be reused).
    pub body: Bytes,
}

/// A connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Conn {
    /// Connects to `host:port`.
    pub async fn open(target: &str) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(target)
            .await
            .with_context(|| format!("cannot connect to {target}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self {
            sender,
            host: target.to_owned(),
        })
    }

    /// Sends one request (a form body makes it a form POST) and reads the answer.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        form: Option<&str>,
    ) -> anyhow::Result<Reply> {
        self.sender.ready().await?;
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes())?)
            .uri(path)
            .header(HOST, &self.host)
            .header(ACCEPT_ENCODING, "gzip");
        if let Some(cookie) = cookie {
            req = req.header(COOKIE, cookie);
        }
        if form.is_some() {
            req = req.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
        }
        let body = Full::new(Bytes::from(form.unwrap_or("").to_owned()));
        let resp = self.sender.send_request(req.body(body)?).await?;
        let status = resp.status().as_u16();
        let session_cookie = resp
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("shop_session="))
            .and_then(|v| v.split(';').next())
            .map(str::to_owned);
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Reply {
            status,
            session_cookie,
            body,
        })
    }
}
