package main

import (
	"reflect"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// checkKV: Put, Get (single key, prefix, count, sorted), Delete (single, prefix, prev kv),
// Txn with a ModRevision compare that succeeds and then fails; and how each of them moves the
// store's revision: one per Put, one per Txn however many writes it makes, none for a Txn that
// only reads.
func checkKV(e *env) {
	p := e.prefix
	a, b, c := p+"a", p+"b", p+"c"
	r0 := currentRev(e)

	ra := put(e, a, "va").Header.Revision
	check(ra == r0+1, "Put(a): header revision %d, want %d (one more than before)", ra, r0+1)
	rb := put(e, b, "vb").Header.Revision
	check(rb == ra+1, "Put(b): header revision %d, want %d", rb, ra+1)
	rc := put(e, c, "vc").Header.Revision
	check(rc == rb+1, "Put(c): header revision %d, want %d", rc, rb+1)

	g := get(e, a)
	check(len(g.Kvs) == 1, "Get(a): %d kvs, want 1", len(g.Kvs))
	kv := g.Kvs[0]
	check(string(kv.Value) == "va" && kv.CreateRevision == ra && kv.ModRevision == ra && kv.Version == 1,
		"Get(a): value %q create %d mod %d version %d, want \"va\" %d %d 1", kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, ra, ra)
	check(g.Header.Revision == rc, "Get(a): header revision %d, want %d (reads do not move it)", g.Header.Revision, rc)

	g = get(e, p, clientv3.WithPrefix())
	check(reflect.DeepEqual(keys(g.Kvs), []string{a, b, c}), "Get(prefix): keys %v, want [a b c]", keys(g.Kvs))
	check(g.Count == 3 && !g.More, "Get(prefix): count %d more %v, want 3 false", g.Count, g.More)
	g = get(e, p, clientv3.WithPrefix(), clientv3.WithLimit(2), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	check(reflect.DeepEqual(keys(g.Kvs), []string{c, b}) && g.Count == 3 && g.More,
		"Get(prefix, limit 2, descending): keys %v count %d more %v, want [c b] 3 true", keys(g.Kvs), g.Count, g.More)
	g = get(e, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	check(len(g.Kvs) == 0 && g.Count == 3, "Get(prefix, count only): %d kvs count %d, want 0 3", len(g.Kvs), g.Count)
	g = get(e, a, clientv3.WithRev(ra))
	check(len(g.Kvs) == 1 && string(g.Kvs[0].Value) == "va", "Get(a, rev %d): %v", ra, g.Kvs)

	// Txn: compare a's mod revision; succeeds and writes.
	ctx, cancel := e.op(10 * time.Second)
	t, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(a), "=", ra)).
		Then(clientv3.OpPut(a, "va2")).
		Else(clientv3.OpGet(a)).
		Commit()
	cancel()
	must(err, "Txn(mod(a) = ra)")
	check(t.Succeeded, "Txn(mod(a) = %d): not succeeded", ra)
	rt1 := t.Header.Revision
	check(rt1 == rc+1, "Txn(mod(a) = ra) with one Put: header revision %d, want %d", rt1, rc+1)
	check(len(t.Responses) == 1 && t.Responses[0].GetResponsePut() != nil, "Txn(mod(a) = ra): responses %v, want one put", t.Responses)

	// Txn with two Puts: one revision for both.
	ctx, cancel = e.op(10 * time.Second)
	t, err = e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(a), "=", "va2"), clientv3.Compare(clientv3.Version(b), "=", 1)).
		Then(clientv3.OpPut(b, "vb2"), clientv3.OpPut(c, "vc2")).
		Commit()
	cancel()
	must(err, "Txn(two puts)")
	check(t.Succeeded, "Txn(value(a) = va2, version(b) = 1): not succeeded")
	rt2 := t.Header.Revision
	check(rt2 == rt1+1, "Txn with two Puts: header revision %d, want %d (exactly one more)", rt2, rt1+1)
	g = get(e, p, clientv3.WithPrefix())
	check(len(g.Kvs) == 3, "Get(prefix) after txn: %d kvs", len(g.Kvs))
	for i, want := range []struct {
		v       string
		mod     int64
		version int64
	}{{"va2", rt1, 2}, {"vb2", rt2, 2}, {"vc2", rt2, 2}} {
		kv := g.Kvs[i]
		check(string(kv.Value) == want.v && kv.ModRevision == want.mod && kv.Version == want.version,
			"after txns, %s: value %q mod %d version %d, want %q %d %d", kv.Key, kv.Value, kv.ModRevision, kv.Version, want.v, want.mod, want.version)
	}

	// The same compare again: a has moved on, so it fails; Else only reads: no new revision.
	ctx, cancel = e.op(10 * time.Second)
	t, err = e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(a), "=", ra)).
		Then(clientv3.OpPut(a, "never")).
		Else(clientv3.OpGet(a)).
		Commit()
	cancel()
	must(err, "Txn(stale mod(a))")
	check(!t.Succeeded, "Txn(mod(a) = %d) after a changed: succeeded, want failed", ra)
	check(t.Header.Revision == rt2, "failed Txn with only a Get: header revision %d, want %d (unchanged)", t.Header.Revision, rt2)
	check(len(t.Responses) == 1, "failed Txn: %d responses, want 1 (the Else Get)", len(t.Responses))
	rr := t.Responses[0].GetResponseRange()
	check(rr != nil && len(rr.Kvs) == 1 && string(rr.Kvs[0].Value) == "va2", "failed Txn: Else Get gave %v, want a = va2", rr)
	v, _ := value(e, a)
	check(v == "va2", "a after failed Txn: %q, want va2", v)
	check(currentRev(e) == rt2, "revision after failed Txn: %d, want %d", currentRev(e), rt2)

	// Delete one key (with its previous value), then the rest by prefix: one revision each.
	ctx, cancel = e.op(10 * time.Second)
	d, err := e.cli.Delete(ctx, a, clientv3.WithPrevKV())
	cancel()
	must(err, "Delete(a)")
	check(d.Deleted == 1, "Delete(a): deleted %d, want 1", d.Deleted)
	check(len(d.PrevKvs) == 1 && string(d.PrevKvs[0].Value) == "va2", "Delete(a, prev kv): prev %v, want a = va2", d.PrevKvs)
	check(d.Header.Revision == rt2+1, "Delete(a): header revision %d, want %d", d.Header.Revision, rt2+1)
	_, ok := value(e, a)
	check(!ok, "a still there after Delete")

	ctx, cancel = e.op(10 * time.Second)
	d, err = e.cli.Delete(ctx, p+"zzz")
	cancel()
	must(err, "Delete(missing)")
	check(d.Deleted == 0 && d.Header.Revision == rt2+1,
		"Delete(missing key): deleted %d revision %d, want 0 %d (nothing deleted, revision unchanged)", d.Deleted, d.Header.Revision, rt2+1)

	ctx, cancel = e.op(10 * time.Second)
	d, err = e.cli.Delete(ctx, p, clientv3.WithPrefix())
	cancel()
	must(err, "Delete(prefix)")
	check(d.Deleted == 2, "Delete(prefix): deleted %d, want 2", d.Deleted)
	check(d.Header.Revision == rt2+2, "Delete(prefix) of 2 keys: header revision %d, want %d (one revision)", d.Header.Revision, rt2+2)
	g = get(e, p, clientv3.WithPrefix())
	check(len(g.Kvs) == 0 && g.Count == 0, "Get(prefix) after deleting it: %d kvs count %d", len(g.Kvs), g.Count)

	// The past is still readable at its revision.
	g = get(e, b, clientv3.WithRev(rb))
	check(len(g.Kvs) == 1 && string(g.Kvs[0].Value) == "vb", "Get(b, rev %d) after delete: %v, want vb", rb, g.Kvs)
}
