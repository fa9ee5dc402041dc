// Scenarios: sync, the Lock recipe, sessions that move, expire or miss changes.
package main

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

func scenarioSync(e *env) {
	w := connect("writer", e.rotate(0), 10*time.Second)
	defer w.Close()
	r := connect("reader", e.rotate(1), 10*time.Second)
	defer r.Close()
	check(w.Server() != r.Server(), "both on %s", w.Server())
	base := mkbase(w, "sync")
	for i := 0; i < 20; i++ {
		v := fmt.Sprintf("v%d", i)
		_, err := w.Set(base, []byte(v), -1)
		must(err, "set")
		got, err := r.Sync(base)
		must(err, "sync")
		check(got == base, "sync answered path %q", got)
		data, _, err := r.Get(base)
		must(err, "get after sync")
		check(string(data) == v, "read %q after sync, want %q", data, v)
	}
	got, err := r.Sync(base + "/missing")
	must(err, "sync on a missing path")
	check(got == base+"/missing", "sync answered path %q", got)
	got, err = r.Sync("/")
	must(err, "sync /")
	check(got == "/", "sync / answered %q", got)
}

func scenarioLock(e *env) {
	a := connect("a", e.rotate(0), 10*time.Second)
	defer a.Close()
	b := connect("b", e.rotate(1), 10*time.Second)
	defer b.Close()
	base := mkbase(a, "lock")
	path := base + "/lock"
	la, lb := zk.NewLock(a.Conn, path, open), zk.NewLock(b.Conn, path, open)

	must(la.Lock(), "a locks")
	expectErr(la.Lock(), zk.ErrDeadlock, "a locks twice")
	got := make(chan error, 1)
	go func() { got <- lb.Lock() }()
	select {
	case err := <-got:
		failf("b acquired the lock held by a (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	kids, _, err := a.Children(path)
	must(err, "children of the lock")
	check(len(kids) == 2, "lock nodes %v", kids)
	must(la.Unlock(), "a unlocks")
	select {
	case err := <-got:
		must(err, "b locks")
	case <-time.After(10 * time.Second):
		failf("b did not get the lock released by a")
	}
	expectErr(la.Unlock(), zk.ErrNotLocked, "a unlocks twice")

	// Contention: both loop; never two holders.
	must(lb.Unlock(), "b unlocks")
	var holders, max, total int32
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, l := range []*zk.Lock{la, lb} {
		wg.Add(1)
		go func(l *zk.Lock) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if err := l.Lock(); err != nil {
					errs <- err
					return
				}
				n := atomic.AddInt32(&holders, 1)
				if n > atomic.LoadInt32(&max) {
					atomic.StoreInt32(&max, n)
				}
				atomic.AddInt32(&total, 1)
				time.Sleep(5 * time.Millisecond)
				atomic.AddInt32(&holders, -1)
				if err := l.Unlock(); err != nil {
					errs <- err
					return
				}
			}
		}(l)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(err, "lock loop")
	}
	check(max == 1 && total == 20, "lock held by %d at once, %d acquisitions", max, total)

	// The holder's session ends: its ephemeral lock node goes and the waiter gets the lock.
	must(la.Lock(), "a locks")
	go func() { got <- lb.Lock() }()
	time.Sleep(300 * time.Millisecond)
	a.Close()
	select {
	case err := <-got:
		must(err, "b locks after a's session closed")
	case <-time.After(10 * time.Second):
		failf("b did not get the lock after a's session closed")
	}
	must(lb.Unlock(), "b unlocks")
}

// scenarioReconnect: the server the client is connected to is killed; the client moves to
// another one with the same session, keeping its ephemeral, its watches and its credentials.
//
// frozen: the server (the leader) first hangs (SIGSTOP); the client gives up on it and sends its
// re-attach to the next server, a follower still following the hung leader; then the leader is
// killed. The follower must answer the re-attach or close the connection once it has a new
// leader, in time for the client to keep its session.
func scenarioReconnect(e *env, frozen bool) {
	victim := e.servers[0]
	c := connect("c", e.servers, 8*time.Second)
	defer c.Close()
	check(c.Server() == victim, "connected to %s, want %s", c.Server(), victim)
	w := connect("writer", e.others(victim), 10*time.Second)
	defer w.Close()
	must(c.AddAuth("digest", []byte("bob:pw")), "AddAuth")
	base := mkbase(c, "reconnect")
	eph, err := c.Create(base+"/eph", []byte("e"), zk.FlagEphemeral, open)
	must(err, "create ephemeral")
	priv, err := c.Create(base+"/priv", []byte("p"), 0, zk.DigestACL(zk.PermAll, "bob", "pw"))
	must(err, "create private")
	_, _, dch, err := c.GetW(base)
	must(err, "GetW")
	_, _, cch, err := c.ChildrenW(base)
	must(err, "ChildrenW")
	_, _, ech, err := c.ExistsW(base + "/later")
	must(err, "ExistsW")
	sid := c.SessionID()
	hs := c.lastHandshake()

	if frozen {
		e.ask("STOP", victim)
		n := c.sentConnectRequests(e.servers[1])
		c.drop()
		waitFor("the re-attach to reach "+e.servers[1], 5*time.Second, func() bool { return c.sentConnectRequests(e.servers[1]) > n })
		time.Sleep(200 * time.Millisecond)
	}
	e.ask("KILL", victim)
	waitFor("a session on another server", 20*time.Second, func() bool {
		return c.State() == zk.StateHasSession && c.Server() != victim
	})
	check(c.SessionID() == sid, "session id changed: %#x -> %#x", sid, c.SessionID())
	hs2 := c.lastHandshake()
	check(hs2.sessionID == sid && string(hs2.passwd) == string(hs.passwd) && hs2.timeoutMs == 8000,
		"re-attach answered session %#x timeout %d", hs2.sessionID, hs2.timeoutMs)
	check(c.sawState(zk.StateDisconnected) && !c.sawState(zk.StateExpired), "states %v", c.states())

	_, err = w.Sync(base)
	must(err, "sync")
	_, st, err := w.Get(eph)
	must(err, "the ephemeral survives")
	check(st.EphemeralOwner == sid, "ephemeral owner %#x", st.EphemeralOwner)
	_, st, err = c.Get(eph)
	must(err, "the client still sees its ephemeral")
	data, _, err := c.Get(priv)
	must(err, "credentials re-sent after reconnection")
	check(string(data) == "p", "data %q", data)

	// The watches were re-registered with setWatches on the new server.
	_, err = w.Set(base, []byte("changed"), -1)
	must(err, "set base")
	expectEvent(dch, zk.EventNodeDataChanged, base, "data watch after reconnection")
	_, err = w.Create(base+"/later", nil, 0, open)
	must(err, "create later")
	expectEvent(ech, zk.EventNodeCreated, base+"/later", "exists watch after reconnection")
	expectEvent(cch, zk.EventNodeChildrenChanged, base, "child watch after reconnection")
	_, err = c.Create(base+"/after", nil, zk.FlagEphemeral, open)
	must(err, "create after reconnection")
}

// scenarioReconnectMissed: a change made while the client is between servers fires its watch
// as soon as setWatches arrives (the server compares with the client's last zxid).
func scenarioReconnectMissed(e *env) {
	victim := e.servers[0]
	c := connect("c", e.servers, 8*time.Second)
	defer c.Close()
	w := connect("writer", e.others(victim), 10*time.Second)
	defer w.Close()
	base := mkbase(c, "missed")
	_, _, dch, err := c.GetW(base)
	must(err, "GetW")
	_, _, ech, err := c.ExistsW(base + "/new")
	must(err, "ExistsW")
	c.block()
	_, err = w.Set(base, []byte("while away"), -1)
	must(err, "set while the client is away")
	_, err = w.Create(base+"/new", nil, 0, open)
	must(err, "create while the client is away")
	c.unblock()
	expectEvent(dch, zk.EventNodeDataChanged, base, "missed data change")
	expectEvent(ech, zk.EventNodeCreated, base+"/new", "missed creation")
	c.waitSession("reconnection")
}

// scenarioExpireClose: another connection attaches the client's session (same id and password)
// and closes it; the client learns that its session expired and starts a new one.
func scenarioExpireClose(e *env, where string) {
	c := connect("c", e.servers, 10*time.Second)
	defer c.Close()
	w := connect("watcher", e.rotate(1), 10*time.Second)
	defer w.Close()
	base := mkbase(c, "expire")
	eph, err := c.Create(base+"/eph", nil, zk.FlagEphemeral, open)
	must(err, "create ephemeral")
	_, _, dch, err := c.GetW(base)
	must(err, "GetW")
	hs := c.lastHandshake()
	server := e.servers[0] // the client's server
	if where == "other" {
		server = e.servers[1]
	}
	logf("closing session %#x through %s (the client is on %s)", hs.sessionID, server, c.Server())
	closeSessionFrom(server, hs.sessionID, hs.passwd)
	_, err = w.Sync(base)
	must(err, "sync")
	waitFor("the closed session's ephemeral to go", 10*time.Second, func() bool { return !exists(w, eph) })
	waitFor("the client to see its session expire", 15*time.Second, func() bool { return c.sawState(zk.StateExpired) })
	select {
	case ev := <-dch:
		check(ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired), "watch ended with %+v", ev)
	case <-time.After(5 * time.Second):
		failf("the watch of the expired session was not ended")
	}
	c.waitSession("a new session")
	check(c.SessionID() != hs.sessionID, "the client kept session %#x", hs.sessionID)
	check(!exists(c, eph), "the ephemeral of the expired session is back")
}

// scenarioExpireTimeout: the client is cut off for longer than its session timeout; the
// servers expire the session, and on reconnection the client is told so.
func scenarioExpireTimeout(e *env) {
	c := connect("c", e.servers, 4*time.Second)
	defer c.Close()
	w := connect("watcher", e.rotate(1), 10*time.Second)
	defer w.Close()
	base := mkbase(c, "timeout")
	eph, err := c.Create(base+"/eph", nil, zk.FlagEphemeral, open)
	must(err, "create ephemeral")
	sid := c.SessionID()
	_, err = w.Sync(eph)
	must(err, "sync")
	check(exists(w, eph), "the watcher does not see the ephemeral")
	c.block()
	start := time.Now()
	waitFor("the servers to expire the session", 20*time.Second, func() bool { return !exists(w, eph) })
	logf("session expired %v after the client was cut off", time.Since(start))
	check(time.Since(start) > 3*time.Second, "the session expired after %v, before its 4 s timeout", time.Since(start))
	c.unblock()
	waitFor("the client to see its session expire", 15*time.Second, func() bool { return c.sawState(zk.StateExpired) })
	c.waitSession("a new session")
	check(c.SessionID() != sid, "the client kept session %#x", sid)
}
