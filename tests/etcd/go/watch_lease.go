package main

import (
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type wantEvent struct {
	typ     mvccpb.Event_EventType
	key     string
	value   string // for a PUT
	rev     int64  // the event's kv mod revision
	prev    string // the previous value, "" for none
	hasPrev bool
}

func (w wantEvent) String() string {
	s := fmt.Sprintf("%s %s@%d", w.typ, w.key, w.rev)
	if w.typ == mvccpb.PUT {
		s += "=" + w.value
	}
	if w.hasPrev {
		s += " prev=" + w.prev
	}
	return s
}

func showEvent(ev *clientv3.Event) string {
	s := fmt.Sprintf("%s %s@%d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision)
	if ev.Type == mvccpb.PUT {
		s += "=" + string(ev.Kv.Value)
	}
	if ev.PrevKv != nil {
		s += " prev=" + string(ev.PrevKv.Value)
	}
	return s
}

// nextEvents reads n events from wch (over as many responses as it takes), failing on an error,
// a closed channel or a timeout.
func nextEvents(wch clientv3.WatchChan, n int, d time.Duration, what string) []*clientv3.Event {
	var got []*clientv3.Event
	timer := time.NewTimer(d)
	defer timer.Stop()
	for len(got) < n {
		select {
		case wr, ok := <-wch:
			if !ok {
				failf("%s: watch channel closed after %d of %d events", what, len(got), n)
			}
			if err := wr.Err(); err != nil {
				failf("%s: watch error %v (compact revision %d, canceled %v) after %d of %d events", what, err, wr.CompactRevision, wr.Canceled, len(got), n)
			}
			got = append(got, wr.Events...)
		case <-timer.C:
			var s []string
			for _, ev := range got {
				s = append(s, showEvent(ev))
			}
			failf("%s: %d of %d events after %v: [%s]", what, len(got), n, d, strings.Join(s, ", "))
		}
	}
	return got
}

func matchEvents(got []*clientv3.Event, want []wantEvent, what string) {
	var gs, ws []string
	for _, ev := range got {
		gs = append(gs, showEvent(ev))
	}
	for _, w := range want {
		ws = append(ws, w.String())
	}
	check(len(got) == len(want), "%s: events [%s], want [%s]", what, strings.Join(gs, ", "), strings.Join(ws, ", "))
	for i, w := range want {
		ev := got[i]
		ok := ev.Type == w.typ && string(ev.Kv.Key) == w.key && ev.Kv.ModRevision == w.rev &&
			(w.typ != mvccpb.PUT || string(ev.Kv.Value) == w.value) &&
			(ev.PrevKv != nil) == w.hasPrev && (!w.hasPrev || string(ev.PrevKv.Value) == w.prev)
		check(ok, "%s: event %d is %s, want %s (all: [%s], want [%s])", what, i, gs[i], ws[i], strings.Join(gs, ", "), strings.Join(ws, ", "))
	}
}

// checkWatch: a prefix watch from a past revision with prev kv replays exactly the events since
// then, in order (two in one Txn share a revision), then live ones; after Compact, a watch from
// before the compaction gets CompactRevision and ErrCompacted and its channel closes, a Get
// there gets ErrCompacted, and a watch from the compaction revision itself works.
func checkWatch(e *env) {
	pfx := e.prefix + "w/"
	k1, k2, k3, k4 := pfx+"1", pfx+"2", pfx+"3", pfx+"4"
	r0 := put(e, k1, "v1").Header.Revision
	r1 := put(e, k1, "v2").Header.Revision
	r2 := put(e, k2, "x").Header.Revision
	put(e, e.prefix+"outside", "o") // not under the watched prefix
	ctx, cancel := e.op(10 * time.Second)
	d, err := e.cli.Delete(ctx, k1)
	cancel()
	must(err, "Delete(k1)")
	r3 := d.Header.Revision
	ctx, cancel = e.op(10 * time.Second)
	t, err := e.cli.Txn(ctx).Then(clientv3.OpPut(k3, "3"), clientv3.OpPut(k4, "4")).Commit()
	cancel()
	must(err, "Txn(put k3, put k4)")
	r4 := t.Header.Revision

	wctx, wcancel := e.op(20 * time.Second)
	defer wcancel()
	wch := e.cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(r0+1), clientv3.WithPrevKV())
	got := nextEvents(wch, 5, 5*time.Second, fmt.Sprintf("Watch(prefix, rev %d, prev kv)", r0+1))
	matchEvents(got, []wantEvent{
		{mvccpb.PUT, k1, "v2", r1, "v1", true},
		{mvccpb.PUT, k2, "x", r2, "", false},
		{mvccpb.DELETE, k1, "", r3, "v2", true},
		{mvccpb.PUT, k3, "3", r4, "", false},
		{mvccpb.PUT, k4, "4", r4, "", false},
	}, fmt.Sprintf("Watch(prefix, rev %d, prev kv) history", r0+1))

	// Then live events, and nothing else in between.
	r5 := put(e, k2, "y").Header.Revision
	got = nextEvents(wch, 1, 5*time.Second, "Watch live event")
	matchEvents(got, []wantEvent{{mvccpb.PUT, k2, "y", r5, "x", true}}, "Watch live event")
	wcancel()

	// Compact at the current revision.
	rc := put(e, k3, "3b").Header.Revision
	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.Compact(ctx, rc)
	cancel()
	must(err, fmt.Sprintf("Compact(%d)", rc))

	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.Get(ctx, k1, clientv3.WithRev(r0))
	cancel()
	expectErr(err, rpctypes.ErrCompacted, fmt.Sprintf("Get(k1, rev %d) after Compact(%d)", r0, rc))

	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.Compact(ctx, rc)
	cancel()
	expectErr(err, rpctypes.ErrCompacted, fmt.Sprintf("Compact(%d) again", rc))
	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.Compact(ctx, rc+1000)
	cancel()
	expectErr(err, rpctypes.ErrFutureRev, fmt.Sprintf("Compact(%d), a future revision", rc+1000))

	cctx, ccancel := e.op(20 * time.Second)
	defer ccancel()
	cch := e.cli.Watch(cctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(r0+1), clientv3.WithPrevKV())
	what := fmt.Sprintf("Watch(prefix, rev %d) after Compact(%d)", r0+1, rc)
	select {
	case wr, ok := <-cch:
		check(ok, "%s: channel closed without a response", what)
		check(len(wr.Events) == 0, "%s: got %d events, want none", what, len(wr.Events))
		check(wr.CompactRevision == rc, "%s: CompactRevision %d, want %d (canceled %v, err %v)", what, wr.CompactRevision, rc, wr.Canceled, wr.Err())
		expectErr(wr.Err(), rpctypes.ErrCompacted, what)
	case <-time.After(5 * time.Second):
		failf("%s: no response in 5s", what)
	}
	select {
	case wr, ok := <-cch:
		check(!ok, "%s: another response after the compaction error: %+v", what, wr)
	case <-time.After(5 * time.Second):
		failf("%s: channel not closed 5s after the compaction error", what)
	}

	// A watch from the compaction revision itself is fine.
	fctx, fcancel := e.op(20 * time.Second)
	defer fcancel()
	fch := e.cli.Watch(fctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(rc))
	got = nextEvents(fch, 1, 5*time.Second, fmt.Sprintf("Watch(prefix, rev %d = compaction revision)", rc))
	// (Without prev kv: etcd 3.4 sends none for an event at the compaction revision, as the
	// revision before is compacted.)
	matchEvents(got, []wantEvent{{mvccpb.PUT, k3, "3b", rc, "", false}}, fmt.Sprintf("Watch(prefix, rev %d = compaction revision)", rc))
}

// checkLease: Grant, Put with the lease, TimeToLive with its keys, KeepAliveOnce, Leases,
// Revoke (which deletes the key; the lease is then gone); a lease of TTL 2 that nobody keeps
// alive expires and takes its key, while one kept alive by KeepAlive outlives its TTL.
func checkLease(e *env) {
	pfx := e.prefix
	k := pfx + "leased"

	ctx, cancel := e.op(10 * time.Second)
	g, err := e.cli.Grant(ctx, 5)
	cancel()
	must(err, "Grant(5)")
	check(g.ID != 0 && g.TTL == 5, "Grant(5): id %x ttl %d, want a nonzero id and ttl 5", g.ID, g.TTL)
	id := g.ID

	put(e, k, "v", clientv3.WithLease(id))
	r := get(e, k)
	check(len(r.Kvs) == 1 && clientv3.LeaseID(r.Kvs[0].Lease) == id, "Get(leased key): %v, want its lease %x", r.Kvs, id)

	ctx, cancel = e.op(10 * time.Second)
	ttl, err := e.cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	cancel()
	must(err, "TimeToLive(keys)")
	check(ttl.ID == id && ttl.TTL > 0 && ttl.TTL <= 5 && ttl.GrantedTTL == 5, "TimeToLive: id %x ttl %d granted %d, want %x, 1..5, 5", ttl.ID, ttl.TTL, ttl.GrantedTTL, id)
	check(len(ttl.Keys) == 1 && string(ttl.Keys[0]) == k, "TimeToLive keys: %q, want [%q]", ttl.Keys, k)

	ctx, cancel = e.op(10 * time.Second)
	ka, err := e.cli.KeepAliveOnce(ctx, id)
	cancel()
	must(err, "KeepAliveOnce")
	check(ka.ID == id && ka.TTL == 5, "KeepAliveOnce: id %x ttl %d, want %x 5", ka.ID, ka.TTL, id)

	ctx, cancel = e.op(10 * time.Second)
	ls, err := e.cli.Leases(ctx)
	cancel()
	must(err, "Leases")
	found := false
	for _, l := range ls.Leases {
		found = found || l.ID == id
	}
	check(found, "Leases: %v does not list %x", ls.Leases, id)

	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.Revoke(ctx, id)
	cancel()
	must(err, "Revoke")
	r = get(e, k)
	check(len(r.Kvs) == 0, "leased key still there after Revoke: %v", r.Kvs)
	ctx, cancel = e.op(10 * time.Second)
	ttl, err = e.cli.TimeToLive(ctx, id)
	cancel()
	must(err, "TimeToLive(revoked)")
	check(ttl.TTL == -1, "TimeToLive of a revoked lease: ttl %d, want -1", ttl.TTL)
	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.KeepAliveOnce(ctx, id)
	cancel()
	expectErr(err, rpctypes.ErrLeaseNotFound, "KeepAliveOnce(revoked)")
	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.Put(ctx, k, "v", clientv3.WithLease(id))
	cancel()
	expectErr(err, rpctypes.ErrLeaseNotFound, "Put with a revoked lease")

	// Expiry: one lease left alone, one kept alive.
	kExp, kKept := pfx+"expiring", pfx+"kept"
	granted := time.Now()
	ctx, cancel = e.op(10 * time.Second)
	g2, err := e.cli.Grant(ctx, 2)
	cancel()
	must(err, "Grant(2)")
	ctx, cancel = e.op(10 * time.Second)
	g3, err := e.cli.Grant(ctx, 2)
	cancel()
	must(err, "Grant(2) kept alive")
	put(e, kExp, "v", clientv3.WithLease(g2.ID))
	put(e, kKept, "v", clientv3.WithLease(g3.ID))
	kactx, kacancel := e.op(30 * time.Second)
	defer kacancel()
	kach, err := e.cli.KeepAlive(kactx, g3.ID)
	must(err, "KeepAlive")
	go func() {
		for range kach { // the client needs its responses consumed
		}
	}()

	for {
		if len(get(e, kExp).Kvs) == 0 {
			break
		}
		if time.Since(granted) > 10*time.Second {
			failf("key of a lease with TTL 2 not kept alive still there after %v", time.Since(granted).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	gone := time.Since(granted)
	check(gone > 1500*time.Millisecond, "key of a lease with TTL 2 gone after only %v", gone.Round(time.Millisecond))
	ctx, cancel = e.op(10 * time.Second)
	ttl, err = e.cli.TimeToLive(ctx, g2.ID)
	cancel()
	must(err, "TimeToLive(expired)")
	check(ttl.TTL == -1, "TimeToLive of an expired lease: ttl %d, want -1", ttl.TTL)

	// The kept-alive one outlives its TTL (wait until 3.5 s after the grant).
	time.Sleep(time.Until(granted.Add(3500 * time.Millisecond)))
	r = get(e, kKept)
	check(len(r.Kvs) == 1, "key of a lease with TTL 2 kept alive by KeepAlive gone after %v", time.Since(granted).Round(time.Millisecond))
	ctx, cancel = e.op(10 * time.Second)
	ttl, err = e.cli.TimeToLive(ctx, g3.ID)
	cancel()
	must(err, "TimeToLive(kept alive)")
	check(ttl.TTL > 0, "TimeToLive of the kept-alive lease: ttl %d after %v, want > 0", ttl.TTL, time.Since(granted).Round(time.Millisecond))
	kacancel()
	ctx, cancel = e.op(10 * time.Second)
	_, err = e.cli.Revoke(ctx, g3.ID)
	cancel()
	must(err, "Revoke(kept alive)")
	check(len(get(e, kKept).Kvs) == 0, "kept-alive key still there after Revoke")
}
