//! etcd's Watch service: one task per stream runs the stream's watchers
//! ([`synod_etcd::watch::Watchers`], the code the simulator checks) over this node's replica
//! of the store. Whenever the store's revision moves, and when a watcher is created, the task
//! polls the watchers under the machine's lock and sends what they owe after releasing it. A
//! client that does not keep up makes its task wait (the stream's queue is bounded) while its
//! watchers stay behind; one left behind the compaction point is cancelled, as etcd does. A
//! progress request is answered once every watcher of the stream is caught up, with the
//! revision they are caught up to.

use super::{status, Answer, EtcdNode};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use synod_etcd::errors;
use synod_etcd::etcdserverpb::{
    watch_request::RequestUnion, watch_server, WatchRequest, WatchResponse,
};
use synod_etcd::watch::Watchers;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

pub struct Watch(pub Arc<EtcdNode>);

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

/// Responses queued on one stream before its task waits for the client.
const STREAM_QUEUE: usize = 128;
/// etcd's default interval of progress notifications to idle watchers that asked for them.
const PROGRESS_NOTIFY: Duration = Duration::from_secs(600);

struct StreamTask {
    node: Arc<EtcdNode>,
    tx: mpsc::Sender<Result<WatchResponse, Status>>,
    watchers: Watchers,
    started: Instant,
}

impl StreamTask {
    fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Send responses, headers completed; false if the client went away.
    async fn send(&self, responses: Vec<WatchResponse>) -> bool {
        for mut r in responses {
            r.header = self.node.header(r.header);
            if self.tx.send(Ok(r)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Poll until every watcher is caught up (sending between polls, off the lock); then, if
    /// asked, a progress response at the revision they are caught up to.
    async fn deliver(&mut self, progress: bool) -> bool {
        loop {
            let now = self.now_us();
            let (out, done) = {
                let m = self.node.machine.lock().expect("etcd machine");
                let mut out = Vec::new();
                self.watchers.poll(m.store(), now, &mut out);
                let done = self.watchers.caught_up(m.store());
                if done && progress {
                    out.extend(self.watchers.progress(m.store()));
                }
                (out, done)
            };
            if !self.send(out).await {
                return false;
            }
            if done {
                return true;
            }
        }
    }

    async fn handle(&mut self, msg: WatchRequest) -> bool {
        let now = self.now_us();
        match msg.request_union {
            Some(RequestUnion::CreateRequest(c)) => {
                let created = {
                    let m = self.node.machine.lock().expect("etcd machine");
                    self.watchers.create(m.store(), &c, now)
                };
                self.send(vec![created]).await && self.deliver(false).await
            }
            Some(RequestUnion::CancelRequest(c)) => {
                let r = {
                    let m = self.node.machine.lock().expect("etcd machine");
                    self.watchers.cancel(m.store(), c.watch_id)
                };
                self.send(r.into_iter().collect()).await
            }
            Some(RequestUnion::ProgressRequest(_)) => self.deliver(true).await,
            None => true,
        }
    }

    async fn run(mut self, mut input: Streaming<WatchRequest>) {
        let mut revision = self.node.machine.lock().expect("etcd machine").subscribe();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            let ok = tokio::select! {
                msg = input.message() => match msg {
                    Ok(Some(msg)) => self.handle(msg).await,
                    _ => false,
                },
                changed = revision.changed() => changed.is_ok() && self.deliver(false).await,
                _ = tick.tick() => {
                    let now = self.now_us();
                    let out = {
                        let m = self.node.machine.lock().expect("etcd machine");
                        self.watchers.idle_progress(m.store(), now, PROGRESS_NOTIFY.as_micros() as u64)
                    };
                    self.send(out).await
                }
            };
            if !ok {
                return;
            }
        }
    }
}

#[tonic::async_trait]
impl watch_server::Watch for Watch {
    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<Streaming<WatchRequest>>) -> Answer<Self::WatchStream> {
        crate::metrics::etcd().request("Watch");
        let n = self.0.clone();
        n.check_leader(&req)?;
        let Ok(permit) = n.streams.clone().try_acquire_owned() else {
            return Err(status(errors::TOO_MANY_REQUESTS));
        };
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let task = StreamTask {
            watchers: Watchers::new(n.cfg.max_watches_per_stream),
            node: n,
            tx,
            started: Instant::now(),
        };
        let input = req.into_inner();
        tokio::spawn(async move {
            let _permit = permit;
            task.run(input).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
