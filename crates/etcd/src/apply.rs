//! etcd's requests on the store, exactly as etcd applies them (etcd 3.4's etcdserver/apply.go
//! and mvcc, read as the reference; no code taken): the checks etcd makes before it proposes a
//! request ([`check_put`], [`check_txn`], …), Range with its options, Put, DeleteRange, Txn
//! (compares evaluated on the state the Txn starts from, nested Txns included; reads inside see
//! the Txn's own writes) and Compact. One request that changes anything raises the revision by
//! exactly one; a request that changes nothing leaves it.

use crate::errors::{self, Failure};
use crate::etcdserverpb::{
    compare::{CompareResult, CompareTarget, TargetUnion},
    range_request::{SortOrder, SortTarget},
    request_op, response_op, Compare, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, RequestOp, ResponseHeader, ResponseOp, TxnRequest,
    TxnResponse,
};
use crate::lease::Leases;
use crate::mvccpb::KeyValue;
use crate::store::{Span, Store, Version};
use crate::MAX_TXN_OPS;
use bytes::Bytes;
use std::cmp::Ordering;
use std::collections::BTreeSet;

fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision,
        ..ResponseHeader::default()
    })
}

// ---- The checks etcd makes before proposing (api/v3rpc/key.go) ----

pub fn check_range(r: &RangeRequest) -> Result<(), Failure> {
    if r.key.is_empty() {
        return Err(errors::EMPTY_KEY);
    }
    Ok(())
}

pub fn check_put(r: &PutRequest) -> Result<(), Failure> {
    if r.key.is_empty() {
        return Err(errors::EMPTY_KEY);
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(errors::VALUE_PROVIDED);
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(errors::LEASE_PROVIDED);
    }
    Ok(())
}

pub fn check_delete(r: &DeleteRangeRequest) -> Result<(), Failure> {
    if r.key.is_empty() {
        return Err(errors::EMPTY_KEY);
    }
    Ok(())
}

/// A Txn's shape: at most `max` compares and ops per branch (nested Txns get what is left),
/// every op well formed, and no key written twice on one path.
pub fn check_txn(r: &TxnRequest) -> Result<(), Failure> {
    check_txn_ops(r, MAX_TXN_OPS)?;
    check_intervals(&r.success)?;
    check_intervals(&r.failure)?;
    Ok(())
}

fn check_txn_ops(r: &TxnRequest, max: usize) -> Result<(), Failure> {
    if r.compare.len() > max || r.success.len() > max || r.failure.len() > max {
        return Err(errors::TOO_MANY_OPS);
    }
    for (ops, n) in [(&r.success, r.success.len()), (&r.failure, r.failure.len())] {
        for op in ops {
            match &op.request {
                Some(request_op::Request::RequestRange(q)) => check_range(q)?,
                Some(request_op::Request::RequestPut(q)) => check_put(q)?,
                Some(request_op::Request::RequestDeleteRange(q)) => check_delete(q)?,
                Some(request_op::Request::RequestTxn(t)) => check_txn_ops(t, max - n)?,
                None => {}
            }
        }
    }
    Ok(())
}

/// Deleted spans of one level, as intervals that points are tested against.
#[derive(Default)]
struct Dels(Vec<Span>);

impl Dels {
    fn hits(&self, k: &[u8]) -> bool {
        self.0.iter().any(|s| s.contains(k))
    }
}

/// etcd's duplicate-key rule (checkIntervals): a key put twice, or put and deleted, on one
/// path of a Txn is refused; a key put in both branches of a nested Txn is fine.
fn check_intervals(ops: &[RequestOp]) -> Result<(BTreeSet<Bytes>, Dels), Failure> {
    let mut dels = Dels::default();
    for op in ops {
        if let Some(request_op::Request::RequestDeleteRange(d)) = &op.request {
            dels.0.push(Span::new(&d.key, &d.range_end));
        }
    }
    let mut puts = BTreeSet::new();
    for op in ops {
        let Some(request_op::Request::RequestTxn(t)) = &op.request else {
            continue;
        };
        let (puts_then, dels_then) = check_intervals(&t.success)?;
        let (puts_else, dels_else) = check_intervals(&t.failure)?;
        for k in &puts_then {
            if puts.contains(k) || dels.hits(k) {
                return Err(errors::DUPLICATE_KEY);
            }
            puts.insert(k.clone());
        }
        for k in &puts_else {
            if (puts.contains(k) && !puts_then.contains(k)) || dels.hits(k) {
                return Err(errors::DUPLICATE_KEY);
            }
            puts.insert(k.clone());
        }
        dels.0.extend(dels_then.0);
        dels.0.extend(dels_else.0);
    }
    for op in ops {
        let Some(request_op::Request::RequestPut(p)) = &op.request else {
            continue;
        };
        if puts.contains(&p.key) || dels.hits(&p.key) {
            return Err(errors::DUPLICATE_KEY);
        }
        puts.insert(p.key.clone());
    }
    Ok((puts, dels))
}

// ---- Reads ----

/// A Range at the store's `latest` revision (the current one, or a writing Txn's own).
pub fn range(store: &Store, latest: i64, r: &RangeRequest) -> Result<RangeResponse, Failure> {
    if r.revision > latest {
        return Err(errors::FUTURE_REV);
    }
    let rev = if r.revision <= 0 { latest } else { r.revision };
    if rev < store.compacted() {
        return Err(errors::COMPACTED);
    }
    let span = Span::new(&r.key, &r.range_end);
    let mut kvs: Vec<KeyValue> = store.range(&span, rev).collect();
    let count = kvs.len() as i64;
    if r.count_only {
        return Ok(RangeResponse {
            header: header(latest),
            kvs: Vec::new(),
            more: false,
            count,
        });
    }
    if r.max_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision <= r.max_mod_revision);
    }
    if r.min_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision >= r.min_mod_revision);
    }
    if r.max_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision <= r.max_create_revision);
    }
    if r.min_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision >= r.min_create_revision);
    }
    let target = SortTarget::try_from(r.sort_target).unwrap_or(SortTarget::Key);
    let mut order = SortOrder::try_from(r.sort_order).unwrap_or(SortOrder::None);
    // etcd: a target other than the key sorts ascending by default (keys come sorted).
    if target != SortTarget::Key && order == SortOrder::None {
        order = SortOrder::Ascend;
    }
    if order != SortOrder::None {
        let by = |a: &KeyValue, b: &KeyValue| -> Ordering {
            match target {
                SortTarget::Key => a.key.cmp(&b.key),
                SortTarget::Version => a.version.cmp(&b.version),
                SortTarget::Create => a.create_revision.cmp(&b.create_revision),
                SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
                SortTarget::Value => a.value.cmp(&b.value),
            }
        };
        // Stable: equal elements stay in key order (etcd's sort leaves ties unspecified).
        match order {
            SortOrder::Descend => kvs.sort_by(|a, b| by(b, a)),
            _ => kvs.sort_by(by),
        }
    }
    let mut more = false;
    if r.limit > 0 && kvs.len() > r.limit as usize {
        kvs.truncate(r.limit as usize);
        more = true;
    }
    if r.keys_only {
        for kv in &mut kvs {
            kv.value = Bytes::new();
        }
    }
    Ok(RangeResponse {
        header: header(latest),
        kvs,
        more,
        count,
    })
}

// ---- Writes ----

/// One request's changes, all at revision `main` (the store's next), numbered by `sub`.
pub struct Writer<'a> {
    pub store: &'a mut Store,
    pub leases: &'a mut Leases,
    main: i64,
    sub: i64,
}

impl<'a> Writer<'a> {
    pub fn new(store: &'a mut Store, leases: &'a mut Leases) -> Self {
        let main = store.revision() + 1;
        Writer {
            store,
            leases,
            main,
            sub: 0,
        }
    }

    /// The revision reads see: the request's own once it changed something.
    pub fn latest(&self) -> i64 {
        if self.sub > 0 {
            self.main
        } else {
            self.store.revision()
        }
    }

    /// Put a key (checked by [`check_put_applied`]): its create revision and version carry
    /// on from its live version; its lease changes hands. The response names the request's
    /// revision, as etcd's does.
    fn put(&mut self, r: &PutRequest) -> PutResponse {
        let prev = self.store.get(&r.key);
        let value = match (&prev, r.ignore_value) {
            (Some(p), true) => p.value.clone(),
            _ => r.value.clone(),
        };
        let lease = match (&prev, r.ignore_lease) {
            (Some(p), true) => p.lease,
            _ => r.lease,
        };
        let (create, version) = match &prev {
            Some(p) => (p.create_revision, p.version + 1),
            None => (self.main, 1),
        };
        if let Some(p) = &prev {
            if p.lease != 0 && p.lease != lease {
                self.leases.detach(p.lease, &r.key);
            }
        }
        if lease != 0 {
            self.leases.attach(lease, &r.key);
        }
        self.store.record(
            &r.key,
            self.main,
            self.sub,
            Some(Version {
                value,
                create,
                version,
                lease,
            }),
        );
        self.sub += 1;
        PutResponse {
            header: header(self.main),
            prev_kv: if r.prev_kv { prev } else { None },
        }
    }

    /// Delete every live key of a span. The response names the request's revision, or the
    /// current one if nothing in the request changed anything (etcd's rule).
    pub fn delete(&mut self, span: &Span, prev_kv: bool) -> DeleteRangeResponse {
        let latest = self.latest();
        let gone: Vec<KeyValue> = self.store.range(span, latest).collect();
        for kv in &gone {
            if kv.lease != 0 {
                self.leases.detach(kv.lease, &kv.key);
            }
            self.store.record(&kv.key, self.main, self.sub, None);
            self.sub += 1;
        }
        DeleteRangeResponse {
            header: header(self.latest()),
            deleted: gone.len() as i64,
            prev_kvs: if prev_kv { gone } else { Vec::new() },
        }
    }

    /// End the request: the store moves to its revision if it changed anything.
    pub fn finish(self) -> i64 {
        self.store.finish(self.sub > 0);
        self.store.revision()
    }
}

/// The checks etcd makes while applying a put: the key must exist to keep its value or lease,
/// and the lease must exist.
fn check_put_applied(store: &Store, leases: &Leases, r: &PutRequest) -> Result<(), Failure> {
    if (r.ignore_value || r.ignore_lease) && store.get(&r.key).is_none() {
        return Err(errors::KEY_NOT_FOUND);
    }
    if r.lease != 0 && !leases.contains(r.lease) {
        return Err(errors::LEASE_NOT_FOUND);
    }
    Ok(())
}

pub fn put(store: &mut Store, leases: &mut Leases, r: &PutRequest) -> Result<PutResponse, Failure> {
    check_put(r)?;
    check_put_applied(store, leases, r)?;
    let mut w = Writer::new(store, leases);
    let resp = w.put(r);
    w.finish();
    Ok(resp)
}

pub fn delete_range(
    store: &mut Store,
    leases: &mut Leases,
    r: &DeleteRangeRequest,
) -> Result<DeleteRangeResponse, Failure> {
    check_delete(r)?;
    let mut w = Writer::new(store, leases);
    let resp = w.delete(&Span::new(&r.key, &r.range_end), r.prev_kv);
    w.finish();
    Ok(resp)
}

// ---- Txn ----

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    let target = CompareTarget::try_from(c.target).unwrap_or(CompareTarget::Version);
    let ord = match target {
        CompareTarget::Value => {
            let v = match &c.target_union {
                Some(TargetUnion::Value(v)) => v.as_ref(),
                _ => &[],
            };
            kv.value.as_ref().cmp(v)
        }
        CompareTarget::Version => kv.version.cmp(&int(c, target)),
        CompareTarget::Create => kv.create_revision.cmp(&int(c, target)),
        CompareTarget::Mod => kv.mod_revision.cmp(&int(c, target)),
        CompareTarget::Lease => kv.lease.cmp(&int(c, target)),
    };
    match CompareResult::try_from(c.result).unwrap_or(CompareResult::Equal) {
        CompareResult::Equal => ord == Ordering::Equal,
        CompareResult::Greater => ord == Ordering::Greater,
        CompareResult::Less => ord == Ordering::Less,
        CompareResult::NotEqual => ord != Ordering::Equal,
    }
}

/// The compare's integer operand for `target` (0 when the union holds another kind).
fn int(c: &Compare, target: CompareTarget) -> i64 {
    match (&c.target_union, target) {
        (Some(TargetUnion::Version(v)), CompareTarget::Version)
        | (Some(TargetUnion::CreateRevision(v)), CompareTarget::Create)
        | (Some(TargetUnion::ModRevision(v)), CompareTarget::Mod)
        | (Some(TargetUnion::Lease(v)), CompareTarget::Lease) => *v,
        _ => 0,
    }
}

/// A compare on the state at `rev`: true for every key of its span; a key that does not exist
/// compares as zeros (and never equal by value).
fn compare(store: &Store, rev: i64, c: &Compare) -> bool {
    let span = Span::new(&c.key, &c.range_end);
    let mut any = false;
    for kv in store.range(&span, rev) {
        any = true;
        if !compare_kv(c, &kv) {
            return false;
        }
    }
    if any {
        return true;
    }
    CompareTarget::try_from(c.target) != Ok(CompareTarget::Value)
        && compare_kv(c, &KeyValue::default())
}

/// Which branch every Txn on the path takes, decided on the state before any write (etcd's
/// compareToPath), in the order the ops are executed.
fn path(store: &Store, rev: i64, t: &TxnRequest, out: &mut Vec<bool>) {
    let ok = t.compare.iter().all(|c| compare(store, rev, c));
    out.push(ok);
    for op in if ok { &t.success } else { &t.failure } {
        if let Some(request_op::Request::RequestTxn(n)) = &op.request {
            path(store, rev, n, out);
        }
    }
}

/// The checks etcd makes on the chosen ops before executing any (checkRequests): reads at a
/// serviceable revision, puts with their key and lease.
fn check_path(
    store: &Store,
    leases: &Leases,
    t: &TxnRequest,
    path: &[bool],
    at: &mut usize,
) -> Result<(), Failure> {
    let ok = path[*at];
    *at += 1;
    for op in if ok { &t.success } else { &t.failure } {
        match &op.request {
            Some(request_op::Request::RequestRange(r)) => {
                if r.revision > store.revision() {
                    return Err(errors::FUTURE_REV);
                }
                if r.revision > 0 && r.revision < store.compacted() {
                    return Err(errors::COMPACTED);
                }
            }
            Some(request_op::Request::RequestPut(p)) => check_put_applied(store, leases, p)?,
            Some(request_op::Request::RequestTxn(n)) => check_path(store, leases, n, path, at)?,
            _ => {}
        }
    }
    Ok(())
}

fn execute(w: &mut Writer, t: &TxnRequest, path: &[bool], at: &mut usize) -> TxnResponse {
    let ok = path[*at];
    *at += 1;
    let mut responses = Vec::new();
    for op in if ok { &t.success } else { &t.failure } {
        let r = match &op.request {
            Some(request_op::Request::RequestRange(r)) => {
                // Checked above, but the revision a read may ask for moves with the Txn's writes.
                let resp = range(w.store, w.latest(), r).unwrap_or_else(|_| RangeResponse {
                    header: header(w.latest()),
                    ..RangeResponse::default()
                });
                Some(response_op::Response::ResponseRange(resp))
            }
            Some(request_op::Request::RequestPut(p)) => {
                Some(response_op::Response::ResponsePut(w.put(p)))
            }
            Some(request_op::Request::RequestDeleteRange(d)) => {
                Some(response_op::Response::ResponseDeleteRange(
                    w.delete(&Span::new(&d.key, &d.range_end), d.prev_kv),
                ))
            }
            Some(request_op::Request::RequestTxn(n)) => {
                Some(response_op::Response::ResponseTxn(execute(w, n, path, at)))
            }
            None => None,
        };
        responses.push(ResponseOp { response: r });
    }
    TxnResponse {
        header: header(w.latest()),
        succeeded: ok,
        responses,
    }
}

pub fn txn(store: &mut Store, leases: &mut Leases, t: &TxnRequest) -> Result<TxnResponse, Failure> {
    check_txn(t)?;
    let begin = store.revision();
    let mut p = Vec::new();
    path(store, begin, t, &mut p);
    check_path(store, leases, t, &p, &mut 0)?;
    let mut w = Writer::new(store, leases);
    let mut resp = execute(&mut w, t, &p, &mut 0);
    let rev = w.finish();
    resp.header = header(rev);
    Ok(resp)
}

/// Whether a Txn can write on any path (etcd serves the others as reads, without the log).
pub fn txn_is_read_only(t: &TxnRequest) -> bool {
    t.success
        .iter()
        .chain(&t.failure)
        .all(|op| match &op.request {
            Some(request_op::Request::RequestRange(_)) | None => true,
            Some(request_op::Request::RequestTxn(n)) => txn_is_read_only(n),
            _ => false,
        })
}

/// A read-only Txn on the store as it is (no revision change, nothing recorded).
pub fn txn_read(store: &Store, t: &TxnRequest) -> Result<TxnResponse, Failure> {
    check_txn(t)?;
    let latest = store.revision();
    fn run(store: &Store, latest: i64, t: &TxnRequest) -> Result<TxnResponse, Failure> {
        let ok = t.compare.iter().all(|c| compare(store, latest, c));
        let mut responses = Vec::new();
        for op in if ok { &t.success } else { &t.failure } {
            let r = match &op.request {
                Some(request_op::Request::RequestRange(r)) => Some(
                    response_op::Response::ResponseRange(range(store, latest, r)?),
                ),
                Some(request_op::Request::RequestTxn(n)) => {
                    Some(response_op::Response::ResponseTxn(run(store, latest, n)?))
                }
                _ => None,
            };
            responses.push(ResponseOp { response: r });
        }
        Ok(TxnResponse {
            header: header(latest),
            succeeded: ok,
            responses,
        })
    }
    run(store, latest, t)
}
