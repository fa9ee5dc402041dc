//! Background duties of the ZooKeeper front end: whether this server serves clients (from the
//! group's view, as soon as it changes), touches of its sessions, and, on the replica the view
//! names leader, session expiry and container/TTL reaping.
//!
//! The view's leader is the duty holder. Under Zab and PFT it is the established leader or
//! primary; under Mencius it is the lowest-id replica the local failure detector does not
//! suspect, so two replicas may hold the duties at once for a while (their detectors disagree,
//! or one is cut off and names itself), and a holder's commands may be decided long after it
//! made them. Both are harmless by construction of the commands, checked when they are
//! applied: an expiry (`Txn::Expire`) names the session's last touch the holder saw and is
//! void if a later touch was ordered first, or if the session is already closed (so a session
//! expires exactly once, and never while its touches are being ordered); a reap removes a node
//! only if it is still due when applied.

use super::expiry::{Deadlines, Touches};
use super::{now_ms, ConnEvent, Front, LocalSession};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_zk::jute::Acl;
use synod_zk::machine::{Effects, Txn};
use tokio::sync::watch;
use tracing::info;

/// The effects of applied transactions on this server's clients.
pub(super) struct FrontEffects {
    pub(super) sessions: Arc<Mutex<HashMap<i64, LocalSession>>>,
    pub(super) touches: Arc<Mutex<Touches>>,
}

impl Effects for FrontEffects {
    fn watch(&self, session: i64, event_type: i32, path: &str, acl: Option<&Arc<Vec<Acl>>>) {
        let s = self.sessions.lock().expect("sessions");
        if let Some(ls) = s.get(&session) {
            if ls
                .events
                .try_send(ConnEvent(event_type, path.to_string(), acl.cloned()))
                .is_err()
            {
                ls.close.send_replace(Some("too many queued watch events"));
            }
        }
    }
    fn session_closed(&self, session: i64) {
        self.touches.lock().expect("touches").forget(session);
        let s = self.sessions.lock().expect("sessions");
        if let Some(ls) = s.get(&session) {
            ls.close.send_replace(Some("session closed"));
        }
    }
    fn touched(&self, sessions: &[i64]) {
        let now = Instant::now();
        let mut t = self.touches.lock().expect("touches");
        for s in sessions {
            t.touch(*s, now);
        }
    }
}

/// How often the duties run (touch rounds every 500 ms, expiry and reaping checks).
const DUTY_TICK: Duration = Duration::from_millis(50);

/// A session's timeout.
fn timeout(timeout_ms: i32) -> Duration {
    Duration::from_millis(timeout_ms.max(0) as u64)
}

/// Background duties: whether this server serves clients (on every change of the group's
/// view); touches of its sessions; and, where the view names this replica leader, session
/// expiry and container/TTL reaping.
pub(super) async fn run(front: Arc<Front>, serving: watch::Sender<bool>) {
    let mut view = front.group.watch();
    let mut tick = tokio::time::interval(DUTY_TICK);
    let mut last_touch_round = Instant::now();
    let mut led_epoch: Option<u64> = None;
    // Expiries asked for: when, and the session's last touch they named.
    let mut expiring: HashMap<i64, (Instant, u64)> = HashMap::new();
    let mut reaping: HashMap<String, Instant> = HashMap::new();
    // When each session may have run out its timeout (expiry.rs).
    let mut deadlines = Deadlines::default();
    loop {
        tokio::select! {
            changed = view.changed() => {
                if changed.is_err() {
                    return; // the host is gone
                }
            }
            _ = tick.tick() => {}
        }
        let v = *view.borrow_and_update();
        // The planted stale-sync bug also keeps serving a server that lost its leader: it then
        // answers reads (and "syncs") from a deposed state for as long as it is cut off.
        let is_serving = front.cfg.bug_stale_sync || v.serving();
        serving.send_if_modified(|s| {
            let changed = *s != is_serving;
            *s = is_serving;
            changed
        });
        if !is_serving {
            led_epoch = None;
            front.touches.lock().expect("touches").fresh.clear();
            continue;
        }
        if last_touch_round.elapsed() >= Duration::from_millis(500) {
            last_touch_round = Instant::now();
            let sessions: Vec<i64> = front.active.lock().expect("active").drain().collect();
            if !sessions.is_empty() {
                let f = front.clone();
                tokio::spawn(async move {
                    let again = sessions.clone();
                    if f.submit(Txn::Touch { sessions }).await.is_err() {
                        // Not delivered (overload, no leader): try again next round rather than
                        // let live sessions expire.
                        f.active.lock().expect("active").extend(again);
                    }
                });
            }
        }
        if v.leader != Some(front.group.me) {
            led_epoch = None;
            // Only the duty holder queues deadlines (it queues every session when it starts).
            front.touches.lock().expect("touches").fresh.clear();
            continue;
        }
        let now = Instant::now();
        if led_epoch != Some(v.epoch) {
            // A new leader gives every session a full timeout of grace, and forgets what it
            // asked to expire or reap before: those requests may have been lost with an
            // earlier epoch (a deposed leader's proposals are), so they are made again when due.
            led_epoch = Some(v.epoch);
            expiring.clear();
            reaping.clear();
            deadlines.clear();
            let sessions: Vec<(i64, Duration)> = front
                .machine
                .lock()
                .expect("machine")
                .tree
                .sessions
                .iter()
                .map(|(&id, s)| (id, timeout(s.timeout_ms)))
                .collect();
            let mut t = front.touches.lock().expect("touches");
            t.last.clear();
            t.fresh.clear();
            for (id, timeout) in sessions {
                t.last.insert(id, now);
                deadlines.queue(id, now + timeout);
            }
        }
        let (expired, due) = {
            let m = front.machine.lock().expect("machine");
            let mut t = front.touches.lock().expect("touches");
            // Sessions seen for the first time (created, attached): queued at their deadline.
            // Then the sessions whose deadline came, and only they, are looked at.
            for id in std::mem::take(&mut t.fresh) {
                let last = t.last.get(&id).copied().unwrap_or(now);
                if let Some(s) = m.tree.sessions.get(&id) {
                    deadlines.queue(id, last + timeout(s.timeout_ms));
                }
            }
            let mut expired = Vec::new();
            for id in deadlines.take_due(now) {
                let Some(s) = m.tree.sessions.get(&id) else {
                    t.forget(id); // closed: forgotten
                    continue;
                };
                let timeout = timeout(s.timeout_ms);
                let last = *t.last.entry(id).or_insert(now);
                if now.duration_since(last) > timeout {
                    expired.push((id, s.touched));
                    // Looked at again one timeout later, should this expiry be void.
                    deadlines.queue(id, now + timeout.max(DUTY_TICK));
                } else {
                    deadlines.queue(id, last + timeout);
                }
            }
            (expired, m.due_for_reaping(now_ms(), 100))
        };
        // A request not applied within 10 s is made again. The time is that of the request,
        // never refreshed while the session stays due: a session continuously expired would
        // otherwise never be asked for again (a chaos run of paxos left the ephemerals of two
        // abandoned sessions behind that way: their first close was lost with a view).
        expiring.retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(10));
        reaping.retain(|_, at| now.duration_since(*at) < Duration::from_secs(10));
        for (id, touched) in expired {
            // Asked already, about the same last touch: wait for it. A session touched since
            // (the expiry was void, or this holder was catching up) is asked about again as
            // soon as it is due again.
            if expiring.get(&id).is_some_and(|&(_, t)| t == touched) {
                continue;
            }
            expiring.insert(id, (now, touched));
            info!(session = format!("{id:#x}"), "session expired");
            // The expiry names the last touch this holder saw: void if a later one is
            // ordered first (this holder was cut off, or another holder's clients were
            // active). Sessions restored from a snapshot older than the touch record
            // (touched 0) are closed as before.
            let txn = if touched == 0 {
                Txn::CloseSession { session: id }
            } else {
                Txn::Expire {
                    session: id,
                    touched,
                }
            };
            let f = front.clone();
            tokio::spawn(async move {
                let _ = f.submit(txn).await;
            });
        }
        for path in due {
            if let Entry::Vacant(e) = reaping.entry(path.clone()) {
                e.insert(now);
                let f = front.clone();
                tokio::spawn(async move {
                    let _ = f
                        .submit(Txn::Reap {
                            path,
                            time_ms: now_ms(),
                        })
                        .await;
                });
            }
        }
    }
}
