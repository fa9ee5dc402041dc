//! etcd's Watch service. One task per stream holds the stream's watchers, each with the next
//! revision it owes its client. Whenever the store's revision moves (and when a watcher is
//! created), the task reads, from the store's index by revision, every change from each
//! watcher's next revision to the current one, and sends them one response per revision, in
//! revision order: nothing skipped, nothing twice. A watcher the client does not keep up with
//! simply stays behind (the stream's queue is bounded); one left behind the compaction point is
//! cancelled with `compact_revision`, as etcd does. A progress request is answered once every
//! watcher of the stream is caught up, with the revision they are caught up to.

use super::{status, Answer, EtcdNode};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use synod_etcd::errors;
use synod_etcd::etcdserverpb::{
    watch_create_request::FilterType, watch_request::RequestUnion, watch_server,
    WatchCreateRequest, WatchRequest, WatchResponse,
};
use synod_etcd::mvccpb::{event::EventType, Event};
use synod_etcd::store::Span;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

pub struct Watch(pub Arc<EtcdNode>);

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

/// Responses queued on one stream before its task waits for the client.
const STREAM_QUEUE: usize = 128;
/// Revisions read for one watcher per pass (a watcher far behind catches up in several).
const REVISIONS_PER_PASS: usize = 1_000;
/// etcd's default interval of progress notifications to idle watchers that asked for them.
const PROGRESS_NOTIFY: Duration = Duration::from_secs(600);
/// etcd's reason for a duplicate client-chosen watch id.
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

struct Watcher {
    span: Span,
    /// The next revision this watcher owes its client.
    next: i64,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
    fragment: bool,
    /// When this watcher last sent something (for progress notifications).
    last_sent: Instant,
}

struct StreamTask {
    node: Arc<EtcdNode>,
    tx: mpsc::Sender<Result<WatchResponse, Status>>,
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
}

impl StreamTask {
    fn response(&self, revision: i64, watch_id: i64) -> WatchResponse {
        WatchResponse {
            header: self
                .node
                .header(Some(synod_etcd::etcdserverpb::ResponseHeader {
                    revision,
                    ..Default::default()
                })),
            watch_id,
            ..WatchResponse::default()
        }
    }

    async fn send(&self, r: WatchResponse) -> bool {
        self.tx.send(Ok(r)).await.is_ok()
    }

    async fn create(&mut self, c: WatchCreateRequest) -> bool {
        let current = self
            .node
            .machine
            .lock()
            .expect("etcd machine")
            .store()
            .revision();
        let id = if c.watch_id != 0 {
            c.watch_id
        } else {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id
        };
        if self.watchers.contains_key(&id)
            || self.watchers.len() >= self.node.cfg.max_watches_per_stream
        {
            let mut r = self.response(current, id);
            r.created = true;
            r.canceled = true;
            r.cancel_reason = if self.watchers.contains_key(&id) {
                DUPLICATE_ID.into()
            } else {
                "too many watches on this stream".into()
            };
            return self.send(r).await;
        }
        let filters: Vec<_> = c
            .filters
            .iter()
            .filter_map(|f| FilterType::try_from(*f).ok())
            .collect();
        let key = if c.key.is_empty() {
            bytes::Bytes::from_static(&[0])
        } else {
            c.key.clone()
        };
        self.watchers.insert(
            id,
            Watcher {
                span: Span::new(&key, &c.range_end),
                next: if c.start_revision <= 0 {
                    current + 1
                } else {
                    c.start_revision
                },
                prev_kv: c.prev_kv,
                no_put: filters.contains(&FilterType::Noput),
                no_delete: filters.contains(&FilterType::Nodelete),
                progress_notify: c.progress_notify,
                fragment: c.fragment,
                last_sent: Instant::now(),
            },
        );
        let mut r = self.response(current, id);
        r.created = true;
        self.send(r).await
    }

    /// Send every watcher what it owes, up to the current revision; returns that revision, or
    /// `None` if the client went away.
    async fn deliver(&mut self) -> Option<i64> {
        loop {
            let (current, batches, cancelled) = self.collect();
            let behind = !batches.is_empty();
            for (id, compact) in cancelled {
                let mut r = self.response(current, id);
                r.canceled = true;
                r.compact_revision = compact;
                r.cancel_reason = errors::COMPACTED.message.into();
                if !self.send(r).await {
                    return None;
                }
            }
            for (id, rev, events) in batches {
                let fragment = self.watchers.get(&id).is_some_and(|w| w.fragment);
                for r in self.split(id, rev, events, fragment) {
                    if !self.send(r).await {
                        return None;
                    }
                }
                if let Some(w) = self.watchers.get_mut(&id) {
                    w.last_sent = Instant::now();
                }
            }
            let caught_up = self.watchers.values().all(|w| w.next > current);
            if caught_up || !behind {
                return Some(current);
            }
        }
    }

    /// Under the machine's lock: each watcher's events, whole revisions only, at most
    /// [`REVISIONS_PER_PASS`] each; the watchers the compaction left behind.
    #[allow(clippy::type_complexity)]
    fn collect(&mut self) -> (i64, Vec<(i64, i64, Vec<Event>)>, Vec<(i64, i64)>) {
        let m = self.node.machine.lock().expect("etcd machine");
        let store = m.store();
        let current = store.revision();
        let mut batches = Vec::new();
        let mut cancelled = Vec::new();
        for (&id, w) in &mut self.watchers {
            if w.next > current {
                continue;
            }
            if w.next < store.compacted() {
                cancelled.push((id, store.compacted()));
                continue;
            }
            let mut revs = 0;
            let mut upto = current;
            let mut group: Option<(i64, Vec<Event>)> = None;
            for (rev, e) in store.events(w.next, current, &w.span, w.prev_kv) {
                if group.as_ref().is_none_or(|(r, _)| *r != rev) {
                    if let Some((r, evs)) = group.take() {
                        batches.push((id, r, evs));
                    }
                    revs += 1;
                    if revs > REVISIONS_PER_PASS {
                        upto = rev - 1;
                        break;
                    }
                    group = Some((rev, Vec::new()));
                }
                let put = e.r#type == EventType::Put as i32;
                if (put && w.no_put) || (!put && w.no_delete) {
                    continue;
                }
                group.as_mut().expect("opened").1.push(e);
            }
            if let Some((r, evs)) = group.take() {
                batches.push((id, r, evs));
            }
            w.next = upto + 1;
        }
        for (id, _) in &cancelled {
            self.watchers.remove(id);
        }
        // Filters can leave a revision with no event: nothing to send for it.
        batches.retain(|(_, _, evs)| !evs.is_empty());
        (current, batches, cancelled)
    }

    /// One revision's response, or its fragments when the watcher accepts them and it is
    /// larger than etcd's request limit.
    fn split(&self, id: i64, rev: i64, events: Vec<Event>, fragment: bool) -> Vec<WatchResponse> {
        let limit = synod_etcd::MAX_REQUEST_BYTES;
        let size: usize = events.iter().map(prost::Message::encoded_len).sum();
        if !fragment || size <= limit {
            let mut r = self.response(rev, id);
            r.events = events;
            return vec![r];
        }
        let mut out = Vec::new();
        let mut cur: Vec<Event> = Vec::new();
        let mut bytes = 0;
        for e in events {
            let n = prost::Message::encoded_len(&e);
            if !cur.is_empty() && bytes + n > limit {
                let mut r = self.response(rev, id);
                r.events = std::mem::take(&mut cur);
                r.fragment = true;
                out.push(r);
                bytes = 0;
            }
            bytes += n;
            cur.push(e);
        }
        let mut r = self.response(rev, id);
        r.events = cur;
        out.push(r);
        out
    }

    /// etcd's periodic progress notification, to idle caught-up watchers that asked for it.
    async fn notify_progress(&mut self) -> bool {
        let current = self
            .node
            .machine
            .lock()
            .expect("etcd machine")
            .store()
            .revision();
        let now = Instant::now();
        let due: Vec<i64> = self
            .watchers
            .iter()
            .filter(|(_, w)| {
                w.progress_notify && w.next > current && now >= w.last_sent + PROGRESS_NOTIFY
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if !self.send(self.response(current, id)).await {
                return false;
            }
            if let Some(w) = self.watchers.get_mut(&id) {
                w.last_sent = now;
            }
        }
        true
    }

    async fn run(mut self, mut input: Streaming<WatchRequest>) {
        let mut revision = self.node.machine.lock().expect("etcd machine").subscribe();
        let mut progress = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                msg = input.message() => {
                    let Ok(Some(msg)) = msg else { return };
                    let ok = match msg.request_union {
                        Some(RequestUnion::CreateRequest(c)) => {
                            self.create(c).await && self.deliver().await.is_some()
                        }
                        Some(RequestUnion::CancelRequest(c)) if self.watchers.remove(&c.watch_id).is_some() => {
                            let current = self.node.machine.lock().expect("etcd machine").store().revision();
                            let mut r = self.response(current, c.watch_id);
                            r.canceled = true;
                            self.send(r).await
                        }
                        Some(RequestUnion::ProgressRequest(_)) => match self.deliver().await {
                            // Not tied to a watcher: etcd 3.4 answers with watch id -1.
                            Some(rev) => self.send(self.response(rev, -1)).await,
                            None => false,
                        },
                        Some(RequestUnion::CancelRequest(_)) | None => true,
                    };
                    if !ok {
                        return;
                    }
                }
                changed = revision.changed() => {
                    if changed.is_err() || self.deliver().await.is_none() {
                        return;
                    }
                }
                _ = progress.tick() => {
                    if !self.notify_progress().await {
                        return;
                    }
                }
            }
        }
    }
}

#[tonic::async_trait]
impl watch_server::Watch for Watch {
    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<Streaming<WatchRequest>>) -> Answer<Self::WatchStream> {
        let n = self.0.clone();
        n.check_leader(&req)?;
        let Ok(permit) = n.streams.clone().try_acquire_owned() else {
            return Err(status(errors::TOO_MANY_REQUESTS));
        };
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let task = StreamTask {
            node: n,
            tx,
            watchers: BTreeMap::new(),
            next_id: 0,
        };
        let input = req.into_inner();
        tokio::spawn(async move {
            let _permit = permit;
            task.run(input).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
