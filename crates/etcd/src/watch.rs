//! The watchers of one watch stream, sans-IO: the server's stream task
//! (crates/server/src/etcd/watch.rs) and the simulator run this same code.
//!
//! Each watcher keeps the next revision it owes its client. [`Watchers::poll`] reads, from the
//! store's index by revision, every change from each watcher's next revision to the current
//! one and turns them into responses, one per revision, in revision order: nothing skipped,
//! nothing twice. A watcher far behind catches up over several polls ([`REVISIONS_PER_POLL`]
//! each). A watcher left behind the compaction point is cancelled with `compact_revision`, as
//! etcd does. Responses carry the revision in their header; the server adds the rest.

use crate::etcdserverpb::{
    watch_create_request::FilterType, ResponseHeader, WatchCreateRequest, WatchResponse,
};
use crate::mvccpb::{event::EventType, Event};
use crate::store::{Span, Store};
use std::collections::BTreeMap;

/// Revisions read for one watcher per poll.
pub const REVISIONS_PER_POLL: usize = 1_000;
/// etcd's reasons for refusing a watch: a duplicate client-chosen id, a range that holds no key.
pub const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
pub const EMPTY_RANGE: &str = "mvcc: watcher range is empty";

struct Watcher {
    span: Span,
    /// The next revision this watcher owes its client.
    next: i64,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
    fragment: bool,
    /// When this watcher last sent something (the caller's clock, for progress notifications).
    last_sent_us: u64,
}

/// A bug to plant, to prove the simulator's watch checker catches it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Plant {
    #[default]
    None,
    /// Two consecutive revisions are sent in the wrong order.
    OutOfOrder,
}

pub struct Watchers {
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
    max: usize,
    plant: Plant,
}

fn response(revision: i64, watch_id: i64) -> WatchResponse {
    WatchResponse {
        header: Some(ResponseHeader {
            revision,
            ..ResponseHeader::default()
        }),
        watch_id,
        ..WatchResponse::default()
    }
}

impl Watchers {
    /// A stream that holds at most `max` watchers.
    pub fn new(max: usize) -> Self {
        Watchers {
            watchers: BTreeMap::new(),
            next_id: 0,
            max,
            plant: Plant::None,
        }
    }

    pub fn plant(&mut self, plant: Plant) {
        self.plant = plant;
    }

    pub fn len(&self) -> usize {
        self.watchers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// Create a watcher; the created response (or, for a taken id or a full stream, a created
    /// and cancelled one). Its events come from the next polls.
    pub fn create(&mut self, store: &Store, c: &WatchCreateRequest, now_us: u64) -> WatchResponse {
        let current = store.revision();
        let span = Span::new(&c.key, &c.range_end);
        let refusal = if c.watch_id != 0 && self.watchers.contains_key(&c.watch_id) {
            Some(DUPLICATE_ID.to_string())
        } else if matches!(&span, Span::Range(a, b) if b <= a) {
            Some(EMPTY_RANGE.to_string())
        } else if self.watchers.len() >= self.max {
            Some(format!(
                "too many watches on this stream (at most {})",
                self.max
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            // etcd: created and cancelled at once, with no watch id.
            let mut r = response(current, -1);
            r.created = true;
            r.canceled = true;
            r.cancel_reason = why;
            return r;
        }
        let id = if c.watch_id != 0 {
            c.watch_id
        } else {
            // Ids given here are never given again on this stream (etcd 3.4).
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id += 1;
            self.next_id - 1
        };
        let mut r = response(current, id);
        r.created = true;
        let filters: Vec<_> = c
            .filters
            .iter()
            .filter_map(|f| FilterType::try_from(*f).ok())
            .collect();
        self.watchers.insert(
            id,
            Watcher {
                span,
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
                last_sent_us: now_us,
            },
        );
        r
    }

    /// Cancel a watcher: etcd answers only a watcher that existed.
    pub fn cancel(&mut self, store: &Store, id: i64) -> Option<WatchResponse> {
        self.watchers.remove(&id)?;
        let mut r = response(store.revision(), id);
        r.canceled = true;
        Some(r)
    }

    /// Whether every watcher has been sent everything up to the store's revision.
    pub fn caught_up(&self, store: &Store) -> bool {
        self.watchers.values().all(|w| w.next > store.revision())
    }

    /// etcd's answer to a progress request, once [`Watchers::caught_up`]: every event up to
    /// the revision in its header was sent (not tied to a watcher: etcd 3.4 names id -1). A
    /// stream without watchers gets none, as from etcd.
    pub fn progress(&self, store: &Store) -> Option<WatchResponse> {
        debug_assert!(self.caught_up(store));
        (!self.watchers.is_empty()).then(|| response(store.revision(), -1))
    }

    /// One pass: what each watcher owes, whole revisions only, at most [`REVISIONS_PER_POLL`]
    /// each; the cancellations of watchers the compaction left behind.
    pub fn poll(&mut self, store: &Store, now_us: u64, out: &mut Vec<WatchResponse>) {
        let current = store.revision();
        let mut cancelled = Vec::new();
        for (&id, w) in &mut self.watchers {
            if w.next > current {
                continue;
            }
            if w.next < store.compacted() {
                let mut r = response(current, id);
                r.canceled = true;
                // etcd 3.4 gives no reason: clients read `compact_revision`.
                r.compact_revision = store.compacted();
                out.push(r);
                cancelled.push(id);
                continue;
            }
            let first = out.len();
            let mut revs = 0;
            let mut upto = current;
            let mut group: Option<(i64, Vec<Event>)> = None;
            for (rev, e) in store.events(w.next, current, &w.span, w.prev_kv) {
                if group.as_ref().is_none_or(|(r, _)| *r != rev) {
                    if let Some((r, evs)) = group.take() {
                        push(out, id, r, evs, w.fragment);
                    }
                    revs += 1;
                    if revs > REVISIONS_PER_POLL {
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
                push(out, id, r, evs, w.fragment);
            }
            w.next = upto + 1;
            if out.len() > first {
                w.last_sent_us = now_us;
            }
            if self.plant == Plant::OutOfOrder && out.len() >= first + 2 {
                out.swap(first, first + 1);
            }
        }
        for id in cancelled {
            self.watchers.remove(&id);
        }
    }

    /// etcd's periodic progress notification: to each watcher that asked for them, is caught
    /// up and sent nothing for `every_us`.
    pub fn idle_progress(
        &mut self,
        store: &Store,
        now_us: u64,
        every_us: u64,
    ) -> Vec<WatchResponse> {
        let current = store.revision();
        let mut out = Vec::new();
        for (&id, w) in &mut self.watchers {
            if w.progress_notify && w.next > current && now_us >= w.last_sent_us + every_us {
                out.push(response(current, id));
                w.last_sent_us = now_us;
            }
        }
        out
    }
}

/// One revision's response, or its fragments when the watcher accepts them and it is larger
/// than etcd's request limit. A revision whose events the filters all dropped sends nothing.
fn push(out: &mut Vec<WatchResponse>, id: i64, rev: i64, events: Vec<Event>, fragment: bool) {
    if events.is_empty() {
        return;
    }
    let limit = crate::MAX_REQUEST_BYTES;
    let size: usize = events.iter().map(prost::Message::encoded_len).sum();
    if !fragment || size <= limit {
        let mut r = response(rev, id);
        r.events = events;
        out.push(r);
        return;
    }
    let mut cur: Vec<Event> = Vec::new();
    let mut bytes = 0;
    for e in events {
        let n = prost::Message::encoded_len(&e);
        if !cur.is_empty() && bytes + n > limit {
            let mut r = response(rev, id);
            r.events = std::mem::take(&mut cur);
            r.fragment = true;
            out.push(r);
            bytes = 0;
        }
        bytes += n;
        cur.push(e);
    }
    let mut r = response(rev, id);
    r.events = cur;
    out.push(r);
}
