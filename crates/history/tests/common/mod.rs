//! Test support: a history builder, a generator of histories from a sequential execution of the
//! model, and a brute-force linearizability checker written independently of the crate.
#![allow(dead_code)]

use std::collections::HashMap;
use synod_history::{
    Call, History, KeyResult, LinReport, LinViolation, Op, Outcome, Ret, ZnodeState,
};

/// Builds histories by hand. Sessions equal process ids.
#[derive(Default)]
pub struct Builder {
    pub history: History,
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn op(
        &mut self,
        process: u64,
        key: &str,
        call: Call,
        invoke: u64,
        complete: Option<u64>,
        outcome: Outcome,
    ) -> u64 {
        let id = self.history.ops.len() as u64 + 1;
        self.history.ops.push(Op {
            id,
            process,
            session: process as i64,
            key: key.to_string(),
            call,
            invoke_ns: invoke,
            complete_ns: complete,
            outcome,
            zxid: None,
            node: None,
        });
        id
    }

    pub fn read(&mut self, p: u64, key: &str, t: (u64, u64), value: i64, version: i32) -> u64 {
        let ret = Ret::Read { value, version };
        self.op(p, key, Call::Read, t.0, Some(t.1), Outcome::Ok(ret))
    }

    pub fn write(&mut self, p: u64, key: &str, t: (u64, u64), value: i64, version: i32) -> u64 {
        let ret = Ret::Written { version };
        self.op(
            p,
            key,
            Call::Write { value },
            t.0,
            Some(t.1),
            Outcome::Ok(ret),
        )
    }

    /// A cas that succeeded with `new_version`, or failed with BadVersion if `None`.
    pub fn cas(
        &mut self,
        p: u64,
        key: &str,
        t: (u64, u64),
        expect_version: i32,
        value: i64,
        new_version: Option<i32>,
    ) -> u64 {
        let ret = match new_version {
            Some(version) => Ret::Written { version },
            None => Ret::BadVersion,
        };
        self.op(
            p,
            key,
            Call::Cas {
                expect_version,
                value,
            },
            t.0,
            Some(t.1),
            Outcome::Ok(ret),
        )
    }

    pub fn write_unknown(&mut self, p: u64, key: &str, invoke: u64, value: i64) -> u64 {
        self.op(
            p,
            key,
            Call::Write { value },
            invoke,
            None,
            Outcome::Unknown,
        )
    }

    pub fn write_failed(&mut self, p: u64, key: &str, t: (u64, u64), value: i64) -> u64 {
        self.op(
            p,
            key,
            Call::Write { value },
            t.0,
            Some(t.1),
            Outcome::Failed,
        )
    }

    pub fn build(self) -> History {
        self.history
    }
}

/// What happens to a generated op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Applied at its linearization point; the client saw the reply.
    Ok,
    /// Applied at its linearization point; the client never learnt.
    UnknownApplied,
    /// Never applied; the client never learnt.
    UnknownNotApplied,
    /// Never applied; the client knows.
    Failed,
}

/// One generated op: its place in time and what it does.
#[derive(Debug, Clone)]
pub struct OpSpec {
    pub key: usize,
    pub process: u64,
    /// 0 read, 1 write, 2 cas.
    pub kind: u8,
    pub value: i64,
    /// A cas expects the current version plus this (0: it applies).
    pub cas_delta: i32,
    pub invoke: u64,
    pub len: u64,
    /// Where in [invoke, invoke + len] the op takes effect, in percent.
    pub frac: u64,
    pub fate: Fate,
    /// Whether an unknown op records a (meaningless) completion time anyway.
    pub unknown_has_complete: bool,
}

pub fn key_name(k: usize) -> String {
    format!("k{k}")
}

/// The initial state of generated key `k` (key 0 is left at the default).
pub fn initial_of(k: usize) -> Option<ZnodeState> {
    (k > 0).then(|| ZnodeState::new(10 * k as i64, k as i32))
}

/// Executes the specs sequentially in order of their linearization points (each inside its op's
/// interval) on the real model, and records what the clients would have seen.
pub fn generate(specs: &[OpSpec]) -> History {
    let mut history = History::new();
    let nkeys = specs.iter().map(|s| s.key + 1).max().unwrap_or(0);
    let mut states: Vec<ZnodeState> = (0..nkeys)
        .map(|k| initial_of(k).unwrap_or_default())
        .collect();
    for k in 0..nkeys {
        if let Some(s) = initial_of(k) {
            history.initial.insert(key_name(k), s);
        }
    }
    let point = |s: &OpSpec| s.invoke * 100 + s.len * s.frac;
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&i| (point(&specs[i]), i));
    let mut ops: Vec<Option<Op>> = vec![None; specs.len()];
    for i in order {
        let s = &specs[i];
        let state = &mut states[s.key];
        let call = match s.kind {
            0 => Call::Read,
            1 => Call::Write { value: s.value },
            _ => Call::Cas {
                expect_version: state.version + s.cas_delta,
                value: s.value,
            },
        };
        let applied = matches!(s.fate, Fate::Ok | Fate::UnknownApplied);
        let mut ret = None;
        if applied {
            let before = *state;
            *state = model_apply(before, &call);
            ret = Some(model_ret(&call, before, *state));
        }
        let complete = s.invoke * 100 + s.len * 100;
        let (outcome, complete_ns) = match s.fate {
            Fate::Ok => (Outcome::Ok(ret.unwrap()), Some(complete)),
            Fate::Failed => (Outcome::Failed, Some(complete)),
            Fate::UnknownApplied | Fate::UnknownNotApplied => {
                (Outcome::Unknown, s.unknown_has_complete.then_some(complete))
            }
        };
        ops[i] = Some(Op {
            id: i as u64,
            process: s.process,
            session: s.process as i64 + 1000,
            key: key_name(s.key),
            call,
            invoke_ns: s.invoke * 100,
            complete_ns,
            outcome,
            zxid: None,
            node: None,
        });
    }
    history.ops = ops.into_iter().map(Option::unwrap).collect();
    history
}

/// The model's effect of an applied op, written independently of the crate.
/// What the model returns for `call` taking `before` to `after`.
pub fn model_ret(call: &Call, before: ZnodeState, after: ZnodeState) -> Ret {
    match call {
        Call::Read => Ret::Read {
            value: before.value,
            version: before.version,
        },
        _ if after.version != before.version => Ret::Written {
            version: after.version,
        },
        _ => Ret::BadVersion,
    }
}

pub fn model_apply(s: ZnodeState, call: &Call) -> ZnodeState {
    match *call {
        Call::Read => s,
        Call::Write { value } => ZnodeState::new(value, s.version + 1),
        Call::Cas {
            expect_version,
            value,
        } if s.version == expect_version => ZnodeState::new(value, s.version + 1),
        Call::Cas { .. } => s,
    }
}

/// Whether `op`, taking effect in `s`, could have given its recorded outcome; the state after.
fn brute_step(s: ZnodeState, op: &Op) -> Option<ZnodeState> {
    match (&op.call, &op.outcome) {
        (_, Outcome::Unknown) => Some(model_apply(s, &op.call)),
        (Call::Read, Outcome::Ok(Ret::Read { value, version })) => {
            (s.value == *value && s.version == *version).then_some(s)
        }
        (Call::Write { .. }, Outcome::Ok(Ret::Written { version })) => {
            let after = model_apply(s, &op.call);
            (after.version == *version).then_some(after)
        }
        (Call::Cas { expect_version, .. }, Outcome::Ok(Ret::Written { version })) => {
            (s.version == *expect_version && s.version + 1 == *version)
                .then(|| model_apply(s, &op.call))
        }
        (Call::Cas { expect_version, .. }, Outcome::Ok(Ret::BadVersion)) => {
            (s.version != *expect_version).then_some(s)
        }
        _ => None,
    }
}

/// Brute force over the whole history (all keys at once): tries every order of the ops that
/// respects real time (A before B if A completed strictly before B was invoked; unknown ops and
/// ops without completion never complete). Unknown ops may also never take effect. Failed ops
/// are ignored.
pub fn brute_force_linearizable(history: &History) -> bool {
    let ops: Vec<&Op> = history
        .ops
        .iter()
        .filter(|o| o.outcome != Outcome::Failed)
        .collect();
    let complete: Vec<u64> = ops
        .iter()
        .map(|o| match (o.outcome, o.complete_ns) {
            (Outcome::Ok(_), Some(c)) => c,
            _ => u64::MAX,
        })
        .collect();
    let mut states: HashMap<&str, ZnodeState> = HashMap::new();
    for op in &ops {
        states.insert(op.key.as_str(), history.initial_state(&op.key));
    }
    let mut placed = vec![false; ops.len()];
    fn go<'a>(
        ops: &[&'a Op],
        complete: &[u64],
        placed: &mut Vec<bool>,
        states: &mut HashMap<&'a str, ZnodeState>,
    ) -> bool {
        let done = (0..ops.len()).all(|i| placed[i] || !matches!(ops[i].outcome, Outcome::Ok(_)));
        if done {
            return true;
        }
        for i in 0..ops.len() {
            if placed[i] {
                continue;
            }
            let must_wait =
                (0..ops.len()).any(|j| j != i && !placed[j] && complete[j] < ops[i].invoke_ns);
            if must_wait {
                continue;
            }
            let key = ops[i].key.as_str();
            let before = states[key];
            if let Some(after) = brute_step(before, ops[i]) {
                placed[i] = true;
                states.insert(key, after);
                let ok = go(ops, complete, placed, states);
                placed[i] = false;
                states.insert(key, before);
                if ok {
                    return true;
                }
            }
        }
        false
    }
    go(&ops, &complete, &mut placed, &mut states)
}

/// Whether every key of the report is linearizable.
pub fn all_linearizable(report: &LinReport) -> bool {
    report
        .keys
        .values()
        .all(|k| matches!(k.result, KeyResult::Linearizable))
}

/// The only violation of a report (panics unless exactly one key is not linearizable and none
/// is unknown).
pub fn only_violation(report: &LinReport) -> &LinViolation {
    assert!(
        report
            .keys
            .values()
            .all(|k| !matches!(k.result, KeyResult::Unknown(_))),
        "{report}"
    );
    let v: Vec<_> = report.violations().collect();
    assert_eq!(v.len(), 1, "{report}");
    v[0]
}

/// Checks that a violation's diagnosis is self-consistent: its prefix replays through the model
/// from the initial state, in an order consistent with real time, and ends in its state.
pub fn assert_diagnosis_consistent(history: &History, v: &LinViolation) {
    let by_id: HashMap<u64, &Op> = history.ops.iter().map(|o| (o.id, o)).collect();
    let mut state = history.initial_state(&v.key);
    assert_eq!(state, v.initial);
    for (k, id) in v.prefix.iter().enumerate() {
        let op = by_id[id];
        assert_eq!(op.key, v.key);
        state = brute_step(state, op).unwrap_or_else(|| panic!("prefix op {op} does not replay"));
        // No later op of the prefix may have completed before this one was invoked.
        for later in &v.prefix[k + 1..] {
            let later = by_id[later];
            if let (Outcome::Ok(_), Some(c)) = (later.outcome, later.complete_ns) {
                assert!(
                    c >= op.invoke_ns,
                    "prefix violates real time: {later} before {op}"
                );
            }
        }
    }
    assert_eq!(state, v.state);
    assert!(!v.prefix.contains(&v.blocked.op.id));
    assert_eq!(v.blocked.op.key, v.key);
}
