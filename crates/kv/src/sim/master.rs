//! What a bucket's master does in the simulated world: it applies the commands its log
//! commits (sending what they emit to other buckets and answering clients), re-sends what other
//! buckets have not acknowledged, fails over, and may be replaced by a replica restored from a
//! snapshot, which must behave exactly like the state it was restored from.

use super::world::{Ev, Fault, Submission, World};
use crate::bucket::Bucket;
use crate::channel::Out;
use crate::txn::Reply;

impl World {
    /// Apply a committed submission; `live`: by the master that took it in (which sends what
    /// it emits and answers), rather than by a new master finishing its predecessor's log.
    pub(super) fn apply(&mut self, bucket: u32, s: Submission, live: bool) {
        let mut out = Vec::new();
        let n = &mut self.nodes[bucket as usize];
        if self.trace {
            use synod_core::wire::Wire;
            let cmd = crate::txn::Cmd::from_bytes(s.payload.clone());
            self.log.push(format!(
                "{:>9} b{bucket}{} {cmd:?}",
                self.now,
                if live {
                    ""
                } else {
                    " (replayed by the new master)"
                },
            ));
        }
        let reply = n.bucket.apply(&s.payload, &mut out);
        let announced = n.bucket.take_announced();
        if self.trace {
            let line = self.log.last_mut().expect("pushed above");
            *line += &format!(" -> {reply:?}");
            if !announced.is_empty() {
                *line += &format!(" decided {announced:?}");
            }
        }
        if let Some(shadow) = &mut n.shadow {
            let mut out2 = Vec::new();
            let reply2 = shadow.apply(&s.payload, &mut out2);
            shadow.take_announced();
            if (&reply2, &out2, shadow.digest()) != (&reply, &out, n.bucket.digest()) {
                self.violations.push(format!(
                    "bucket {bucket}: restored from a snapshot, it answers or emits differently \
                     from the state it was restored from at {} us: {reply:?} / {reply2:?}, {} / {} \
                     messages",
                    self.now,
                    out.len(),
                    out2.len()
                ));
                n.shadow = None;
            }
        }
        self.stats.applied += 1;
        let epoch = n.epoch;
        for id in &announced {
            let d = n
                .bucket
                .decided(id)
                .cloned()
                .expect("announced, so decided");
            if let Some((first, at)) = self.decisions.get(id) {
                self.violations.push(format!(
                    "{id} decided twice by bucket {bucket}: {:?} at {at} us, {:?} at {} us",
                    first.outcome, d.outcome, self.now
                ));
            } else {
                self.decisions.insert(*id, (d, self.now));
            }
        }
        if !live {
            return;
        }
        for o in out {
            self.send(bucket, o, false);
        }
        for id in announced {
            let n = &mut self.nodes[bucket as usize];
            if let Some((client, tag)) = n.waiters.remove(&id) {
                let d = n
                    .bucket
                    .decided(&id)
                    .cloned()
                    .expect("announced, so decided");
                self.reply(bucket, epoch, client, tag, Reply::Decided(d));
            }
        }
        if let Some(rt) = s.reply_to {
            if reply == Reply::Pending {
                self.nodes[bucket as usize]
                    .waiters
                    .insert(rt.id, (rt.client, rt.tag));
            }
            self.reply(bucket, epoch, rt.client, rt.tag, reply);
        }
    }

    pub(super) fn reply(&mut self, bucket: u32, epoch: u64, client: u32, tag: u64, reply: Reply) {
        if self.lose() {
            return;
        }
        let d = self.between(self.net.client_net_us);
        self.schedule(
            d,
            Ev::ToClient {
                from: (bucket, epoch),
                client,
                tag,
                reply,
            },
        );
    }

    /// The master of `from` sends a command to another bucket (`resend`: on the re-send lane).
    pub(super) fn send(&mut self, from: u32, o: Out, resend: bool) {
        if self.lose() {
            return;
        }
        self.stats.messages += 1;
        let epoch = self.nodes[from as usize].epoch;
        let d = self.between(self.net.bucket_net_us);
        let mut deliveries = if self.chance(self.net.reorder) {
            vec![d]
        } else {
            let lane = self.lanes.entry((from, o.to, resend)).or_insert(0);
            *lane = (*lane).max(self.now + d);
            vec![*lane - self.now]
        };
        if self.chance(self.net.dup) {
            // A stray copy, in no lane's order.
            self.stats.duplicated += 1;
            deliveries.push(self.between(self.net.bucket_net_us));
        }
        for after in deliveries {
            self.schedule(
                after,
                Ev::Arrive {
                    to: o.to,
                    from: Some((from, epoch)),
                    payload: o.payload.clone(),
                    reply_to: None,
                },
            );
        }
    }

    pub(super) fn resend(&mut self, bucket: u32) {
        if !self.nodes[bucket as usize].up {
            return;
        }
        let mut out = Vec::new();
        self.nodes[bucket as usize].bucket.pending(&mut out);
        for o in out {
            self.send(bucket, o, true);
        }
    }

    pub(super) fn fault(&mut self, f: Fault) {
        if self.trace {
            self.log.push(format!("{:>9} fault {f:?}", self.now));
        }
        match f {
            Fault::Failover {
                bucket,
                down_us,
                restore,
            } => {
                if !self.nodes[bucket as usize].up {
                    return;
                }
                self.stats.failovers += 1;
                let keep = self.between((0, self.nodes[bucket as usize].pipeline.len() as u64));
                let n = &mut self.nodes[bucket as usize];
                n.up = false;
                n.epoch += 1;
                n.waiters.clear();
                n.survivors = n.pipeline.drain(..).take(keep as usize).collect();
                n.tail = 0;
                n.restore_on_up = restore;
                self.schedule(down_us, Ev::Up { bucket });
            }
            Fault::Restore { bucket } => self.restore(bucket),
        }
    }

    /// Fail `bucket`'s master now; a new one takes over after a random failover time.
    pub fn fail_master(&mut self, bucket: u32, restore: bool) {
        let down_us = self.between(self.net.failover_us);
        self.fault(Fault::Failover {
            bucket,
            down_us,
            restore,
        });
    }

    pub(super) fn master_up(&mut self, bucket: u32) {
        if self.trace {
            self.log
                .push(format!("{:>9} b{bucket} has a new master", self.now));
        }
        let survivors = std::mem::take(&mut self.nodes[bucket as usize].survivors);
        for s in survivors {
            self.apply(bucket, s, false);
        }
        let n = &mut self.nodes[bucket as usize];
        n.up = true;
        n.tail = self.now;
        self.last_up = self.now;
        if std::mem::take(&mut n.restore_on_up) {
            self.restore(bucket);
        }
        self.resend(bucket);
        let (r, epoch) = (self.net.resend_us, self.nodes[bucket as usize].epoch);
        self.schedule(r, Ev::Resend { bucket, epoch });
    }

    /// Replace the bucket's state by its snapshot, and check nothing changed.
    pub fn restore(&mut self, bucket: u32) {
        self.stats.restores += 1;
        let n = &mut self.nodes[bucket as usize];
        let before = (n.bucket.digest(), n.bucket.state_digest());
        match Bucket::decode(n.bucket.encode()) {
            Ok(copy) => {
                let after = (copy.digest(), copy.state_digest());
                // The whole state, lock table included, must come back (the digests cover
                // the encoding only).
                let (a, b) = (format!("{:?}", n.bucket), format!("{copy:?}"));
                if a != b {
                    self.violations.push(format!(
                        "bucket {bucket}: its snapshot restores a different state at {} us \
                         (lock table or transient state)",
                        self.now
                    ));
                }
                if after != before {
                    self.violations.push(format!(
                        "bucket {bucket}: its snapshot does not restore the same state \
                         (digests {before:x?} before, {after:x?} after) at {} us",
                        self.now
                    ));
                }
                n.shadow = Some(std::mem::replace(&mut n.bucket, copy));
            }
            Err(e) => self.violations.push(format!(
                "bucket {bucket}: its snapshot does not decode ({e}) at {} us",
                self.now
            )),
        }
    }
}
