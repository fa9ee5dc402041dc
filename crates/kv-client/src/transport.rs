//! One RPC attempt and the retry budget around it.
//!
//! Every request either succeeds or fails in one of two ways: it certainly had no effect (the
//! connection was refused, the node redirected it, or it was `BUSY`), or it may have been
//! applied (a timeout, `UNAVAILABLE` from the node that was asked, a broken connection). Reads,
//! views and commits are retried either way (a commit is idempotent by its id); single-key
//! writes only in the first case (a retried compare-and-set could report its own success as a
//! mismatch).

use crate::proto::kv_client::KvClient;
use crate::proto::{self, Error as Code};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// The largest response the client decodes: a value of `MAX_VALUE_BYTES`, or a large view.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// A failed attempt.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// The request may have been applied.
    pub ambiguous: bool,
    pub why: String,
}

impl Failure {
    pub fn not_sent(why: String) -> Failure {
        Failure {
            ambiguous: false,
            why,
        }
    }
}

/// What a response's [`proto::Status`] means for the caller.
pub(crate) enum Verdict {
    /// `NONE`: use the response.
    Served,
    /// `STALE_VIEW`, `NOT_MASTER`, `WRONG_NODE`: not served; the view it carries, if any.
    Redirect(Option<proto::View>),
    /// `UNAVAILABLE` (ambiguous) or `BUSY` (not served): try again later.
    Again(Failure),
    /// `INVALID`, `TOO_LARGE`: not served, and retrying will not help.
    Refused(Code, String),
}

/// Classifies a response status (absent means `NONE`).
pub(crate) fn verdict(addr: &str, status: Option<proto::Status>) -> Verdict {
    let Some(s) = status else {
        return Verdict::Served;
    };
    let code = Code::try_from(s.error).ok();
    let why = format!(
        "{addr}: {} {}",
        code.map_or("error code unknown to this client", |c| c.as_str_name()),
        s.detail
    );
    match code {
        Some(Code::None) => Verdict::Served,
        Some(Code::StaleView | Code::NotMaster | Code::WrongNode) => Verdict::Redirect(s.view),
        Some(Code::Busy) => Verdict::Again(Failure::not_sent(why)),
        Some(c @ (Code::Invalid | Code::TooLarge)) => Verdict::Refused(c, s.detail),
        Some(Code::Unavailable) | None => Verdict::Again(Failure {
            ambiguous: true,
            why,
        }),
    }
}

/// The gRPC channels, one per node address, created on first use and kept.
pub(crate) struct Channels {
    timeout: Duration,
    tls: Option<crate::client::ClientTls>,
    by_address: Mutex<HashMap<String, Channel>>,
}

impl Channels {
    pub fn new(timeout: Duration, tls: Option<crate::client::ClientTls>) -> Channels {
        Channels {
            timeout,
            tls,
            by_address: Mutex::new(HashMap::new()),
        }
    }

    fn stub(&self, addr: &str) -> Result<KvClient<Channel>, Failure> {
        let mut map = self.by_address.lock().expect("channel map poisoned");
        let channel = match map.get(addr) {
            Some(c) => c.clone(),
            None => {
                let scheme = if self.tls.is_some() { "https" } else { "http" };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
                    .map_err(|e| Failure::not_sent(format!("bad address {addr:?}: {e}")))?
                    .connect_timeout(self.timeout)
                    .tcp_nodelay(true);
                if let Some(t) = &self.tls {
                    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
                    let mut c =
                        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&t.ca_pem));
                    if let Some((cert, key)) = &t.identity {
                        c = c.identity(Identity::from_pem(cert, key));
                    }
                    endpoint = endpoint
                        .tls_config(c)
                        .map_err(|e| Failure::not_sent(format!("TLS to {addr}: {e}")))?;
                }
                let c = endpoint.connect_lazy();
                map.insert(addr.to_string(), c.clone());
                c
            }
        };
        Ok(KvClient::new(channel)
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .max_encoding_message_size(usize::MAX))
    }

    /// One attempt of an RPC at `addr`, bounded by the per-call timeout (also sent to the
    /// server as the gRPC deadline). `call` is e.g. `|mut c, r| async move { c.read(r).await }`.
    pub async fn send<Req, Resp, F, Fut>(
        &self,
        addr: &str,
        req: Req,
        call: F,
    ) -> Result<Resp, Failure>
    where
        F: FnOnce(KvClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let stub = self.stub(addr)?;
        let mut request = tonic::Request::new(req);
        request.set_timeout(self.timeout);
        match tokio::time::timeout(self.timeout, call(stub, request)).await {
            Err(_) => Err(Failure {
                ambiguous: true,
                why: format!("{addr}: no answer within {:?}", self.timeout),
            }),
            Ok(Err(status)) => Err(classify(addr, &status)),
            Ok(Ok(response)) => Ok(response.into_inner()),
        }
    }
}

/// A gRPC-level failure: not sent if the connection was refused or the node does not serve
/// the method; otherwise it may have been applied.
fn classify(addr: &str, status: &tonic::Status) -> Failure {
    let why = format!("{addr}: {:?} {}", status.code(), status.message());
    if status.code() == tonic::Code::Unimplemented || connection_refused(status) {
        return Failure::not_sent(why);
    }
    Failure {
        ambiguous: true,
        why,
    }
}

fn connection_refused(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        source = e.source();
    }
    false
}

/// The retry budget of one operation: `retries` more attempts after the first, with an
/// exponential backoff between them.
pub(crate) struct Retry {
    left: u32,
    delay: Duration,
    delay_max: Duration,
    /// Some attempt may have been applied.
    pub ambiguous: bool,
    /// Why the last attempt failed.
    pub last: String,
}

impl Retry {
    pub fn new(retries: u32, backoff_initial: Duration, backoff_max: Duration) -> Retry {
        Retry {
            left: retries,
            delay: backoff_initial,
            delay_max: backoff_max,
            ambiguous: false,
            last: String::new(),
        }
    }

    /// Records a failed attempt; false when the budget is spent. Otherwise it waits the
    /// backoff first if `wait` (a redirect that taught a new master retries at once).
    pub async fn again(&mut self, failure: Failure, wait: bool) -> bool {
        self.ambiguous |= failure.ambiguous;
        self.last = failure.why;
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        if wait {
            tokio::time::sleep(self.delay).await;
            self.delay = (self.delay * 2).min(self.delay_max);
        }
        true
    }
}
