//! The one driver loop: how any driver (the simulator, the server) feeds a core and carries out
//! what it asks for. Written once so that the simulator checks exactly what the server runs.
//!
//! For every input, [`Replica`] steps the core with the current time and then, in this order:
//! 1. hands every storage op to [`Env::persist`] (in `seq` order; the driver makes them durable
//!    and calls [`Replica::durable`]);
//! 2. hands every delivery to [`Env::apply`], in order;
//! 3. hands every event to [`Env::event`];
//! 4. passes every envelope through the [`Outbox`]: those whose barrier is met, and that no held
//!    envelope precedes, go to [`Env::transmit`] at once, the rest when storage catches up.
//!
//! It asserts the contract's invariants on the way (storage sequence numbers increase, durable
//! reports never run ahead of what was issued, time never goes back), so that a core that
//! breaks them crashes a simulated replica instead of corrupting a history.

use crate::outbox::Outbox;
use crate::{Actions, Apply, Command, Envelope, Event, Input, Persist, Protocol, TimeUs, View};

/// What a driver does with a core's outputs.
pub trait Env<P: Protocol> {
    /// Queue storage ops for stable storage, in order; take them out of `ops`.
    fn persist(&mut self, ops: &mut Vec<Persist<P::Record, P::Hard>>);
    /// Hand one delivery to the state machine.
    fn apply(&mut self, apply: Apply);
    /// Observe one event.
    fn event(&mut self, event: Event);
    /// Send an envelope: its barrier is met and everything emitted before it has been sent.
    fn transmit(&mut self, envelope: Envelope<P::Message>);
}

pub struct Replica<P: Protocol> {
    core: P,
    outbox: Outbox<P::Message>,
    actions: Actions<P::Message, P::Record, P::Hard>,
    ready: Vec<Envelope<P::Message>>,
    /// The last storage sequence number issued, and the last reported durable.
    issued_seq: u64,
    durable_seq: u64,
    now: TimeUs,
    /// [`Input::Start`] was stepped.
    started: bool,
}

impl<P: Protocol> Replica<P> {
    /// Drive `core`, holding at most `outbox_limit` envelopes behind durability barriers (a
    /// core that needs more is broken).
    pub fn new(core: P, outbox_limit: usize) -> Self {
        Replica {
            core,
            outbox: Outbox::new(outbox_limit),
            actions: Actions::default(),
            ready: Vec::new(),
            issued_seq: 0,
            durable_seq: 0,
            now: 0,
            started: false,
        }
    }

    /// Boot the core at time `now` ([`Input::Start`]); a driver calls it once, right after
    /// building the replica. Later calls do nothing.
    pub fn start(&mut self, now: TimeUs, env: &mut impl Env<P>) {
        if !self.started {
            self.step(now, Input::Start, env);
        }
    }

    pub fn core(&self) -> &P {
        &self.core
    }

    /// The core's view.
    pub fn view(&self) -> View {
        self.core.view()
    }

    /// When the core next needs [`Input::Timeout`].
    pub fn deadline(&self) -> Option<TimeUs> {
        self.core.deadline()
    }

    /// Every storage op issued so far is durable (a clean shutdown waits for this).
    pub fn all_durable(&self) -> bool {
        self.durable_seq >= self.issued_seq
    }

    /// The last storage sequence number issued.
    pub fn issued_seq(&self) -> u64 {
        self.issued_seq
    }

    /// Envelopes waiting for a durability barrier.
    pub fn held(&self) -> usize {
        self.outbox.held()
    }

    /// Feed one input at time `now` and carry out what the core asks for. The first input of
    /// an incarnation is always [`Input::Start`] (sent here first if the driver did not).
    pub fn step(&mut self, now: TimeUs, input: Input<P::Message>, env: &mut impl Env<P>) {
        assert!(
            now >= self.now,
            "time went back from {}us to {now}us",
            self.now
        );
        self.now = now;
        if !self.started {
            self.started = true;
            if !matches!(input, Input::Start) {
                self.step(now, Input::Start, env);
            }
        }
        let mut out = std::mem::take(&mut self.actions);
        out.clear();
        self.core.step(now, input, &mut out);
        self.carry_out(&mut out, env);
        self.actions = out;
    }

    /// Submit commands (one batch) at time `now`.
    pub fn submit(&mut self, now: TimeUs, commands: Vec<Command>, env: &mut impl Env<P>) {
        if !commands.is_empty() {
            self.step(now, Input::Submit(commands), env);
        }
    }

    /// Wake the core if its deadline has come. Returns whether it was woken.
    ///
    /// A core woken at its deadline must move the deadline past `now` (or clear it): one that
    /// still asks to be woken at once would spin the driver forever.
    pub fn wake(&mut self, now: TimeUs, env: &mut impl Env<P>) -> bool {
        if self.core.deadline().is_none_or(|d| d > now) {
            return false;
        }
        self.step(now, Input::Timeout, env);
        if let Some(d) = self.core.deadline() {
            assert!(
                d > now,
                "woken at {now}us, the core still asks to be woken at {d}us: a timer that never \
                 advances"
            );
        }
        true
    }

    /// Storage reports every op up to `upto` durable: release the envelopes that waited for it
    /// (in order), then tell the core.
    pub fn durable(&mut self, now: TimeUs, upto: u64, env: &mut impl Env<P>) {
        assert!(
            upto <= self.issued_seq,
            "storage reports op {upto} durable, but only {} were issued",
            self.issued_seq
        );
        if upto <= self.durable_seq {
            return;
        }
        self.durable_seq = upto;
        let mut ready = std::mem::take(&mut self.ready);
        self.outbox.durable(upto, |e| ready.push(e));
        for e in ready.drain(..) {
            env.transmit(e);
        }
        self.ready = ready;
        self.step(now, Input::Durable { upto }, env);
    }

    fn carry_out(
        &mut self,
        out: &mut Actions<P::Message, P::Record, P::Hard>,
        env: &mut impl Env<P>,
    ) {
        for p in &out.persist {
            assert!(
                p.seq == self.issued_seq + 1,
                "storage op {} issued after {}: sequence numbers are consecutive",
                p.seq,
                self.issued_seq
            );
            self.issued_seq = p.seq;
        }
        if !out.persist.is_empty() {
            env.persist(&mut out.persist);
        }
        for a in out.apply.drain(..) {
            env.apply(a);
        }
        for e in out.events.drain(..) {
            env.event(e);
        }
        let mut ready = std::mem::take(&mut self.ready);
        for e in out.send.drain(..) {
            assert!(
                e.after_durable <= self.issued_seq,
                "an envelope waits for storage op {} that was never issued",
                e.after_durable
            );
            let accepted = self.outbox.push(e, |e| ready.push(e));
            assert!(accepted, "more envelopes held back than the outbox allows");
        }
        for e in ready.drain(..) {
            env.transmit(e);
        }
        self.ready = ready;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cluster, Dest, DurableState, LogRecord, MessageKind, Role, StorageOp, WireSize};

    #[derive(Clone, Debug)]
    struct Rec(u64);
    impl LogRecord for Rec {
        fn key(&self) -> u64 {
            self.0
        }
        fn carries(&self, id: u64) -> bool {
            self.0 == id
        }
    }
    #[derive(Clone, Debug)]
    struct Msg(u64);
    impl WireSize for Msg {
        fn wire_size(&self) -> usize {
            8
        }
    }
    impl MessageKind for Msg {
        fn kind(&self) -> &'static str {
            "msg"
        }
    }

    /// A core that logs each submitted command, sends one message behind the write and one
    /// with no barrier, and delivers once the write is durable.
    struct Echo {
        seq: u64,
        waiting: Vec<(u64, Command)>,
        bad_seq: bool,
        /// The one timer: at 100 us, or (`stuck`) forever at 100 us.
        timer: Option<TimeUs>,
        stuck: bool,
    }
    impl Protocol for Echo {
        type Options = bool;
        type Message = Msg;
        type Record = Rec;
        type Hard = ();
        fn restore(_: Cluster, bad_seq: bool, _: DurableState<Rec, ()>, _: u64) -> Self {
            Echo {
                seq: 0,
                waiting: Vec::new(),
                bad_seq,
                timer: Some(100),
                stuck: false,
            }
        }
        fn step(&mut self, _now: TimeUs, input: Input<Msg>, out: &mut Actions<Msg, Rec, ()>) {
            match input {
                Input::Submit(cs) => {
                    for c in cs {
                        self.seq += if self.bad_seq { 2 } else { 1 };
                        out.persist.push(Persist {
                            seq: self.seq,
                            op: StorageOp::Append(vec![Rec(c.id)]),
                        });
                        out.send.push(Envelope {
                            to: Dest::All,
                            msg: Msg(c.id),
                            after_durable: self.seq,
                        });
                        out.send.push(Envelope {
                            to: Dest::All,
                            msg: Msg(1000 + c.id),
                            after_durable: 0,
                        });
                        self.waiting.push((self.seq, c));
                    }
                }
                Input::Durable { upto } => {
                    let (done, rest): (Vec<_>, Vec<_>) =
                        self.waiting.drain(..).partition(|(s, _)| *s <= upto);
                    self.waiting = rest;
                    for (s, c) in done {
                        out.apply.push(Apply::Command {
                            at: crate::Position { slot: s, tag: s },
                            command: c,
                        });
                    }
                }
                Input::Timeout if !self.stuck => self.timer = None,
                _ => {}
            }
        }
        fn deadline(&self) -> Option<TimeUs> {
            self.timer
        }
        fn view(&self) -> View {
            View {
                role: Role::Proposer,
                leader: None,
                epoch: 0,
            }
        }
    }

    #[derive(Default)]
    struct Log {
        persisted: Vec<u64>,
        applied: Vec<u64>,
        sent: Vec<u64>,
    }
    impl Env<Echo> for Log {
        fn persist(&mut self, ops: &mut Vec<Persist<Rec, ()>>) {
            self.persisted.extend(ops.drain(..).map(|p| p.seq));
        }
        fn apply(&mut self, a: Apply) {
            if let Apply::Command { command, .. } = a {
                self.applied.push(command.id);
            }
        }
        fn event(&mut self, _: Event) {}
        fn transmit(&mut self, e: Envelope<Msg>) {
            self.sent.push(e.msg.0);
        }
    }

    fn cmd(id: u64) -> Command {
        Command {
            id,
            payload: bytes::Bytes::new(),
        }
    }

    fn replica(bad_seq: bool) -> Replica<Echo> {
        let core = Echo::restore(
            Cluster::new(1, vec![1]),
            bad_seq,
            DurableState::default(),
            0,
        );
        Replica::new(core, 16)
    }

    #[test]
    fn barriers_hold_back_later_envelopes_until_durable() {
        let mut r = replica(false);
        let mut env = Log::default();
        r.submit(10, vec![cmd(1), cmd(2)], &mut env);
        assert_eq!(env.persisted, vec![1, 2]);
        // Message 1 waits for op 1; 1001 was emitted after it and waits too.
        assert!(env.sent.is_empty());
        assert!(!r.all_durable());
        r.durable(20, 1, &mut env);
        assert_eq!(env.sent, vec![1, 1001]);
        assert_eq!(env.applied, vec![1]);
        r.durable(30, 2, &mut env);
        assert_eq!(env.sent, vec![1, 1001, 2, 1002]);
        assert_eq!(env.applied, vec![1, 2]);
        assert!(r.all_durable());
        assert!(!r.wake(99, &mut env), "not yet");
        assert!(r.wake(100, &mut env));
        assert_eq!(r.deadline(), None);
    }

    #[test]
    #[should_panic(expected = "a timer that never advances")]
    fn a_core_that_asks_to_be_woken_again_at_once_is_broken() {
        let mut r = replica(false);
        r.core.stuck = true;
        r.wake(100, &mut Log::default());
    }

    #[test]
    #[should_panic(expected = "consecutive")]
    fn a_gap_in_storage_sequence_numbers_is_a_broken_core() {
        let mut r = replica(true);
        r.submit(0, vec![cmd(1)], &mut Log::default());
    }

    #[test]
    #[should_panic(expected = "time went back")]
    fn time_never_goes_back() {
        let mut r = replica(false);
        let mut env = Log::default();
        r.submit(10, vec![cmd(1)], &mut env);
        r.submit(5, vec![cmd(2)], &mut env);
    }

    #[test]
    #[should_panic(expected = "only 1 were issued")]
    fn durable_reports_never_run_ahead() {
        let mut r = replica(false);
        let mut env = Log::default();
        r.submit(10, vec![cmd(1)], &mut env);
        r.durable(11, 2, &mut env);
    }
}
