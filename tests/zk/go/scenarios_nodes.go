// Scenarios: sessions, create modes, reads and writes, watches, multi, ACLs.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// ---------------------------------------------------------------- scenarios

type env struct {
	servers []string
	in      *bufio.Reader
}

// others returns the servers other than s.
func (e *env) others(s string) []string {
	var out []string
	for _, x := range e.servers {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// rotate returns the servers starting with the i-th.
func (e *env) rotate(i int) []string {
	n := len(e.servers)
	out := make([]string, 0, n)
	for k := 0; k < n; k++ {
		out = append(out, e.servers[(i+k)%n])
	}
	return out
}

// ask asks the driver to KILL (SIGKILL) or STOP (SIGSTOP) a server and waits until it has.
func (e *env) ask(what, s string) {
	logf("asking the driver: %s %s", what, s)
	fmt.Printf("%s %s\n", what, s)
	line, err := e.in.ReadString('\n')
	must(err, "waiting for the driver: "+what+" "+s)
	logf("driver: %s", strings.TrimSpace(line))
}

func scenarioSession(e *env) {
	c := connect("c", e.rotate(0), 1*time.Second)
	defer c.Close()
	hs := c.lastHandshake()
	check(hs.timeoutMs == 4000, "1 s requested: negotiated %d ms, want 4000 (the minimum, 2 ticks)", hs.timeoutMs)
	check(hs.sessionID != 0 && hs.sessionID == c.SessionID(), "session id %#x, ConnectResponse %#x", c.SessionID(), hs.sessionID)
	check(len(hs.passwd) == 16, "password of %d bytes, want 16", len(hs.passwd))
	states := c.states()
	want := []zk.State{zk.StateConnecting, zk.StateConnected, zk.StateHasSession}
	check(reflect.DeepEqual(states, want), "session states %v, want %v", states, want)
	check(c.Server() == e.servers[0], "connected to %s, want %s", c.Server(), e.servers[0])

	long := connect("long", e.rotate(1), 100*time.Second)
	defer long.Close()
	check(long.lastHandshake().timeoutMs == 40000, "100 s requested: negotiated %d ms, want 40000 (the maximum, 20 ticks)", long.lastHandshake().timeoutMs)
	mid := connect("mid", e.rotate(2), 10*time.Second)
	check(mid.lastHandshake().timeoutMs == 10000, "10 s requested: negotiated %d ms, want 10000", mid.lastHandshake().timeoutMs)
	ids := map[int64]bool{c.SessionID(): true, long.SessionID(): true, mid.SessionID(): true}
	check(len(ids) == 3, "three sessions share ids: %#x %#x %#x", c.SessionID(), long.SessionID(), mid.SessionID())

	base := mkbase(c, "session")
	p, err := mid.Create(base+"/eph", nil, zk.FlagEphemeral, open)
	must(err, "create ephemeral")
	_, st, err := mid.Get(p)
	must(err, "get ephemeral")
	check(st.EphemeralOwner == mid.SessionID(), "ephemeralOwner %#x, want the session id %#x", st.EphemeralOwner, mid.SessionID())
	sid := mid.SessionID()
	mid.Close()
	waitFor("the closed client to be disconnected", 5*time.Second, func() bool { return mid.State() == zk.StateDisconnected })
	_, _, err = mid.Get(base)
	expectErr(err, zk.ErrConnectionClosed, "Get after Close")
	_, err = c.Sync(base)
	must(err, "sync")
	waitFor("the closed session's ephemeral to go", 5*time.Second, func() bool { return !exists(c, p) })
	// The closed session cannot be re-attached: the server answers session 0.
	conn, err := net.DialTimeout("tcp", e.servers[0], 5*time.Second)
	must(err, "raw dial")
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 10000)
	req = binary.BigEndian.AppendUint64(req, uint64(sid))
	req = append(req, jbytes(make([]byte, 16))...)
	req = append(req, 0)
	must(writeFrame(conn, req), "raw connect")
	resp, err := readFrame(conn)
	must(err, "raw ConnectResponse for a closed session")
	check(binary.BigEndian.Uint64(resp[8:]) == 0 && binary.BigEndian.Uint32(resp[4:]) == 0,
		"re-attaching a closed session: session %#x timeout %d, want 0 and 0", binary.BigEndian.Uint64(resp[8:]), binary.BigEndian.Uint32(resp[4:]))
}

func scenarioCreateModes(e *env) {
	c := connect("c", e.rotate(0), 10*time.Second)
	defer c.Close()
	base := mkbase(c, "create")
	sid := c.SessionID()

	p, err := c.Create(base+"/p", []byte("d"), zk.FlagPersistent, open)
	must(err, "create persistent")
	check(p == base+"/p", "persistent path %q", p)
	_, st, err := c.Get(p)
	must(err, "get persistent")
	check(st.EphemeralOwner == 0 && st.Version == 0 && st.DataLength == 1 && st.Czxid == st.Mzxid && st.Czxid == st.Pzxid,
		"persistent stat %+v", *st)

	eph, err := c.Create(base+"/e", nil, zk.FlagEphemeral, open)
	must(err, "create ephemeral")
	_, st, err = c.Get(eph)
	must(err, "get ephemeral")
	check(st.EphemeralOwner == sid, "ephemeralOwner %#x, want %#x", st.EphemeralOwner, sid)
	_, err = c.Create(eph+"/child", nil, 0, open)
	expectErr(err, zk.ErrNoChildrenForEphemerals, "child of an ephemeral")

	// The sequence number counts the creations under the parent (ZooKeeper keeps that count as
	// the persisted cversion; the cversion clients see is 2 x creations - children), so a
	// deleted child still counts: p, e, x created and x deleted, the next is 3.
	_, err = c.Create(base+"/x", nil, 0, open)
	must(err, "create x")
	must(c.Delete(base+"/x", -1), "delete x")
	_, st, err = c.Get(base)
	must(err, "get base")
	check(st.Cversion == 4 && st.NumChildren == 2, "base cversion %d numChildren %d, want 4 and 2", st.Cversion, st.NumChildren)
	s1, err := c.Create(base+"/s-", []byte("1"), zk.FlagSequence, open)
	must(err, "create sequential")
	s2, err := c.Create(base+"/s-", []byte("2"), zk.FlagSequence, open)
	must(err, "create sequential")
	check(s1 == base+"/s-0000000003" && s2 == base+"/s-0000000004", "sequential paths %q %q, want s-0000000003, s-0000000004", s1, s2)
	es, err := c.Create(base+"/", nil, zk.FlagEphemeralSequential, open)
	must(err, "create ephemeral-sequential")
	check(es == base+"/0000000005", "ephemeral-sequential path %q, want %s/0000000005", es, base)
	_, st, err = c.Get(es)
	must(err, "get ephemeral-sequential")
	check(st.EphemeralOwner == sid, "ephemeral-sequential owner %#x", st.EphemeralOwner)

	_, err = c.Create(p, nil, 0, open)
	expectErr(err, zk.ErrNodeExists, "create existing")
	_, err = c.Create(base+"/missing/child", nil, 0, open)
	expectErr(err, zk.ErrNoNode, "create under a missing parent")
	_, err = c.Create(base+"/noacl", nil, 0, nil)
	expectErr(err, zk.ErrInvalidACL, "create with an empty ACL")

	// Containers: stored with ephemeralOwner Long.MIN_VALUE, which clients see as 0; reaped once
	// their last child goes, never before they had one.
	box, err := c.CreateContainer(base+"/box", []byte("b"), zk.FlagContainer, open)
	must(err, "create container")
	check(box == base+"/box", "container path %q", box)
	_, st, err = c.Get(box)
	must(err, "get container")
	check(st.EphemeralOwner == 0, "container ephemeralOwner %#x, want 0", uint64(st.EphemeralOwner))
	_, err = c.CreateContainer(base+"/unused", nil, zk.FlagContainer, open)
	must(err, "create unused container")
	_, err = c.CreateContainer(box, nil, zk.FlagContainer, open)
	expectErr(err, zk.ErrNodeExists, "create existing container")
	_, err = c.Create(box+"/item", nil, 0, open)
	must(err, "create container child")
	must(c.Delete(box+"/item", -1), "delete container child")

	// TTL nodes: stored with ephemeralOwner 0xFF00000000000000 | ttl, seen as 0; reaped after
	// ttl without children.
	ttl, err := c.CreateTTL(base+"/ttl", []byte("t"), zk.FlagTTL, open, 300*time.Millisecond)
	must(err, "create TTL")
	check(ttl == base+"/ttl", "TTL path %q", ttl)
	_, st, err = c.Get(ttl)
	must(err, "get TTL")
	check(st.EphemeralOwner == 0, "TTL ephemeralOwner %#x, want 0", uint64(st.EphemeralOwner))
	ttls, err := c.CreateTTL(base+"/ttls-", nil, zk.FlagPersistentSequentialWithTTL, open, 300*time.Millisecond)
	must(err, "create sequential TTL")
	check(ttls == base+"/ttls-0000000009", "sequential TTL path %q, want ttls-0000000009", ttls)
	keep, err := c.CreateTTL(base+"/keep", nil, zk.FlagTTL, open, time.Hour)
	must(err, "create long TTL")
	_, err = c.CreateTTL(base+"/zero", nil, zk.FlagTTL, open, 0)
	expectErr(err, zk.ErrBadArguments, "TTL of 0")

	waitFor("the emptied container to be reaped", 20*time.Second, func() bool { return !exists(c, box) })
	waitFor("the TTL nodes to be reaped", 20*time.Second, func() bool { return !exists(c, ttl) && !exists(c, ttls) })
	check(exists(c, base+"/unused"), "a container that never had a child was reaped")
	check(exists(c, keep), "a TTL node of an hour was reaped")
}

func scenarioCRUD(e *env) {
	c := connect("c", e.rotate(0), 10*time.Second)
	defer c.Close()
	base := mkbase(c, "crud")
	a := base + "/a"
	_, err := c.Create(a, []byte("one"), 0, open)
	must(err, "create")
	data, st, err := c.Get(a)
	must(err, "get")
	check(string(data) == "one" && st.Version == 0 && st.DataLength == 3 && st.NumChildren == 0, "get: %q %+v", data, *st)
	czxid := st.Czxid

	st, err = c.Set(a, []byte("two"), 0)
	must(err, "set at version 0")
	check(st.Version == 1 && st.Mzxid > czxid && st.Czxid == czxid, "set stat %+v", *st)
	_, err = c.Set(a, []byte("three"), 0)
	expectErr(err, zk.ErrBadVersion, "set at a stale version")
	st, err = c.Set(a, []byte("three"), -1)
	must(err, "set at any version")
	check(st.Version == 2, "version after two sets: %d", st.Version)
	data, _, err = c.Get(a)
	must(err, "get")
	check(string(data) == "three", "data %q", data)
	st, err = c.Set(a, nil, 2)
	must(err, "set empty data")
	check(st.DataLength == 0 && st.Version == 3, "empty set stat %+v", *st)

	ok, st, err := c.Exists(a)
	must(err, "exists")
	check(ok && st.Version == 3, "exists: %v %+v", ok, *st)
	ok, _, err = c.Exists(base + "/nope")
	must(err, "exists on a missing node")
	check(!ok, "missing node exists")
	_, _, err = c.Get(base + "/nope")
	expectErr(err, zk.ErrNoNode, "get missing")
	_, err = c.Set(base+"/nope", nil, -1)
	expectErr(err, zk.ErrNoNode, "set missing")
	_, _, err = c.Children(base + "/nope")
	expectErr(err, zk.ErrNoNode, "children of missing")
	expectErr(c.Delete(base+"/nope", -1), zk.ErrNoNode, "delete missing")

	for _, k := range []string{"k3", "k1", "k2"} {
		_, err = c.Create(a+"/"+k, []byte(k), 0, open)
		must(err, "create child "+k)
	}
	kids, st, err := c.Children(a)
	must(err, "children")
	sort.Strings(kids)
	check(reflect.DeepEqual(kids, []string{"k1", "k2", "k3"}), "children %v", kids)
	check(st.NumChildren == 3 && st.Cversion == 3 && st.Version == 3, "children stat %+v", *st)
	pz := st.Pzxid
	expectErr(c.Delete(a, -1), zk.ErrNotEmpty, "delete a node with children")
	expectErr(c.Delete(a+"/k1", 5), zk.ErrBadVersion, "delete at a wrong version")
	must(c.Delete(a+"/k1", 0), "delete at the right version")
	kids, st, err = c.Children(a)
	must(err, "children")
	sort.Strings(kids)
	check(reflect.DeepEqual(kids, []string{"k2", "k3"}) && st.Cversion == 4 && st.Pzxid > pz && st.NumChildren == 2,
		"after a delete: %v %+v", kids, *st)
	kids, _, err = c.Children("/")
	must(err, "children of /")
	check(contains(kids, "zookeeper") && contains(kids, strings.TrimPrefix(base, "/")), "children of /: %v", kids)
	_, err = c.Create(a+"/k2", nil, 0, open)
	expectErr(err, zk.ErrNodeExists, "create existing")
	must(c.Delete(a+"/k2", -1), "delete k2")
	must(c.Delete(a+"/k3", -1), "delete k3")
	must(c.Delete(a, 3), "delete a at its version")
	check(!exists(c, a), "a still exists")
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func scenarioWatches(e *env) {
	c := connect("c", e.rotate(0), 10*time.Second)
	defer c.Close()
	w := connect("writer", e.rotate(1), 10*time.Second)
	defer w.Close()
	base := mkbase(w, "watch")
	a, b := base+"/a", base+"/b"
	_, err := w.Create(a, []byte("1"), 0, open)
	must(err, "create a")
	_, err = c.Sync(base)
	must(err, "sync")

	_, _, ch, err := c.GetW(a)
	must(err, "GetW")
	_, err = w.Set(a, []byte("2"), -1)
	must(err, "set a")
	expectEvent(ch, zk.EventNodeDataChanged, a, "GetW then set")
	_, err = w.Set(a, []byte("3"), -1) // one-shot: no second event
	must(err, "set a again")

	ok, _, ch, err := c.ExistsW(b)
	must(err, "ExistsW on a missing node")
	check(!ok, "b exists")
	_, err = w.Create(b, nil, 0, open)
	must(err, "create b")
	expectEvent(ch, zk.EventNodeCreated, b, "ExistsW then create")

	ok, _, ch, err = c.ExistsW(b)
	must(err, "ExistsW")
	check(ok, "b is missing")
	_, err = w.Set(b, []byte("x"), -1)
	must(err, "set b")
	expectEvent(ch, zk.EventNodeDataChanged, b, "ExistsW then set")

	ok, _, ch, err = c.ExistsW(b)
	must(err, "ExistsW")
	check(ok, "b is missing")
	must(w.Delete(b, -1), "delete b")
	expectEvent(ch, zk.EventNodeDeleted, b, "ExistsW then delete")

	_, _, ch, err = c.ChildrenW(base)
	must(err, "ChildrenW")
	_, err = w.Create(base+"/c", nil, 0, open)
	must(err, "create c")
	expectEvent(ch, zk.EventNodeChildrenChanged, base, "ChildrenW then create a child")
	_, _, ch, err = c.ChildrenW(base)
	must(err, "ChildrenW")
	_, err = w.Set(base+"/c", []byte("no event"), -1) // a child's data is not a child change
	must(err, "set c")
	must(w.Delete(base+"/c", -1), "delete c")
	expectEvent(ch, zk.EventNodeChildrenChanged, base, "ChildrenW then delete a child")

	_, _, _, err = c.ChildrenW(base + "/missing")
	expectErr(err, zk.ErrNoNode, "ChildrenW on a missing node")
	_, _, _, err = c.GetW(base + "/missing")
	expectErr(err, zk.ErrNoNode, "GetW on a missing node")

	// Deleting a node watched three ways sends the session one NodeDeleted, then the parent's
	// child watch fires.
	_, _, dch, err := c.GetW(a)
	must(err, "GetW")
	_, _, ech, err := c.ExistsW(a)
	must(err, "ExistsW")
	_, _, cch, err := c.ChildrenW(a)
	must(err, "ChildrenW")
	_, _, pch, err := c.ChildrenW(base)
	must(err, "ChildrenW on the parent")
	must(w.Delete(a, -1), "delete a")
	expectEvent(dch, zk.EventNodeDeleted, a, "GetW then delete")
	expectEvent(ech, zk.EventNodeDeleted, a, "ExistsW then delete")
	expectEvent(cch, zk.EventNodeDeleted, a, "ChildrenW on the deleted node")
	expectEvent(pch, zk.EventNodeChildrenChanged, base, "ChildrenW on the parent of a deleted node")

	time.Sleep(300 * time.Millisecond)
	type ev struct {
		T zk.EventType
		P string
	}
	var got []ev
	for _, x := range c.watchEvents() {
		got = append(got, ev{x.Type, x.Path})
	}
	want := []ev{
		{zk.EventNodeDataChanged, a}, {zk.EventNodeCreated, b}, {zk.EventNodeDataChanged, b},
		{zk.EventNodeDeleted, b}, {zk.EventNodeChildrenChanged, base}, {zk.EventNodeChildrenChanged, base},
		{zk.EventNodeDeleted, a}, {zk.EventNodeChildrenChanged, base},
	}
	check(reflect.DeepEqual(got, want), "events received:\n  %v\nwant\n  %v", got, want)
}

func scenarioMulti(e *env) {
	c := connect("c", e.rotate(0), 10*time.Second)
	defer c.Close()
	base := mkbase(c, "multi")
	m0 := base + "/m0"
	_, err := c.Create(m0, []byte("0"), 0, open)
	must(err, "create m0")
	_, err = c.Create(base+"/gone", nil, 0, open)
	must(err, "create gone")

	res, err := c.Multi(
		&zk.CreateRequest{Path: base + "/m1", Data: []byte("1"), Acl: open},
		&zk.SetDataRequest{Path: m0, Data: []byte("x"), Version: 0},
		&zk.CheckVersionRequest{Path: m0, Version: 1},
		&zk.DeleteRequest{Path: base + "/gone", Version: -1},
		&zk.CreateRequest{Path: base + "/s-", Acl: open, Flags: zk.FlagSequence},
	)
	must(err, "successful multi")
	check(len(res) == 5, "%d results", len(res))
	check(res[0].String == base+"/m1" && res[0].Error == nil, "create result %+v", res[0])
	check(res[1].Stat != nil && res[1].Stat.Version == 1 && res[1].Error == nil, "setData result %+v", res[1])
	check(res[2].Error == nil && res[3].Error == nil, "check/delete results %+v %+v", res[2], res[3])
	check(res[4].String == base+"/s-0000000003", "sequential create in multi: %q", res[4].String)
	check(!exists(c, base+"/gone"), "deleted in multi, still there")

	// A failing op: the ops before it report OK (rolled back), the failing one its error, the
	// ones after RUNTIMEINCONSISTENCY (-2); nothing is applied.
	res, err = c.Multi(
		&zk.CreateRequest{Path: base + "/m3", Acl: open},
		&zk.SetDataRequest{Path: m0, Data: []byte("y"), Version: -1},
		&zk.CheckVersionRequest{Path: m0, Version: 0},
		&zk.CreateRequest{Path: base + "/m4", Acl: open},
		&zk.DeleteRequest{Path: m0, Version: -1},
	)
	expectErr(err, zk.ErrBadVersion, "multi with a failing check")
	errs := make([]string, len(res))
	for i, r := range res {
		errs[i] = fmt.Sprint(r.Error)
		check(r.String == "" && r.Stat == nil, "result %d of a failed multi carries %+v", i, r)
	}
	want := []string{"<nil>", "<nil>", zk.ErrBadVersion.Error(), "unknown error: -2", "unknown error: -2"}
	check(reflect.DeepEqual(errs, want), "per-op errors %q, want %q", errs, want)
	check(!exists(c, base+"/m3") && !exists(c, base+"/m4"), "a failed multi created nodes")
	data, st, err := c.Get(m0)
	must(err, "get m0")
	check(string(data) == "x" && st.Version == 1, "a failed multi changed m0: %q v%d", data, st.Version)

	res, err = c.Multi(
		&zk.CreateRequest{Path: m0, Acl: open},
		&zk.DeleteRequest{Path: base + "/m1", Version: -1},
	)
	expectErr(err, zk.ErrNodeExists, "multi failing on its first op")
	check(len(res) == 2 && res[0].Error == zk.ErrNodeExists && fmt.Sprint(res[1].Error) == "unknown error: -2", "results %+v", res)
	check(exists(c, base+"/m1"), "m1 deleted by a failed multi")

	res, err = c.Multi(&zk.DeleteRequest{Path: base, Version: -1})
	expectErr(err, zk.ErrNotEmpty, "multi deleting a non-empty node")
	check(len(res) == 1 && res[0].Error == zk.ErrNotEmpty, "results %+v", res)
	res, err = c.Multi(&zk.SetDataRequest{Path: base + "/none", Version: -1})
	expectErr(err, zk.ErrNoNode, "multi setting a missing node")
	check(len(res) == 1 && res[0].Error == zk.ErrNoNode, "results %+v", res)

	res, err = c.Multi()
	must(err, "empty multi")
	check(len(res) == 0, "empty multi results %+v", res)
}

func scenarioACL(e *env) {
	owner := connect("owner", e.rotate(0), 10*time.Second)
	defer owner.Close()
	other := connect("other", e.rotate(1), 10*time.Second)
	defer other.Close()
	must(owner.AddAuth("digest", []byte("alice:secret")), "AddAuth")
	base := mkbase(owner, "acl")
	digest := zk.DigestACL(zk.PermAll, "alice", "secret")
	p, err := owner.Create(base+"/private", []byte("s"), 0, digest)
	must(err, "create with a digest ACL")
	acl, st, err := owner.GetACL(p)
	must(err, "GetACL")
	check(reflect.DeepEqual(acl, digest) && st.Aversion == 0, "ACL %+v aversion %d, want %+v", acl, st.Aversion, digest)
	data, _, err := owner.Get(p)
	must(err, "owner reads")
	check(string(data) == "s", "data %q", data)

	_, err = other.Sync(base)
	must(err, "sync")
	_, _, err = other.Get(p)
	expectErr(err, zk.ErrNoAuth, "get without auth")
	_, err = other.Set(p, nil, -1)
	expectErr(err, zk.ErrNoAuth, "set without auth")
	_, _, err = other.GetACL(p)
	expectErr(err, zk.ErrNoAuth, "GetACL without READ or ADMIN")
	_, err = other.SetACL(p, open, -1)
	expectErr(err, zk.ErrNoAuth, "SetACL without ADMIN")
	_, err = other.Create(p+"/child", nil, 0, open)
	expectErr(err, zk.ErrNoAuth, "create without CREATE")
	_, _, err = other.Children(p)
	expectErr(err, zk.ErrNoAuth, "children without READ")

	// The "auth" scheme means the creator's identities; without any it is an invalid ACL.
	q, err := owner.Create(base+"/mine", nil, 0, zk.AuthACL(zk.PermAll))
	must(err, "create with the auth scheme")
	acl, _, err = owner.GetACL(q)
	must(err, "GetACL")
	check(reflect.DeepEqual(acl, digest), "auth-scheme ACL %+v, want %+v", acl, digest)
	_, err = other.Create(base+"/theirs", nil, 0, zk.AuthACL(zk.PermAll))
	expectErr(err, zk.ErrInvalidACL, "auth scheme without credentials")

	// SetACL with versions; READ for the world, digest ids masked without ADMIN.
	mixed := append(zk.WorldACL(zk.PermRead), digest...)
	_, err = owner.SetACL(p, mixed, 5)
	expectErr(err, zk.ErrBadVersion, "SetACL at a wrong version")
	st, err = owner.SetACL(p, mixed, 0)
	must(err, "SetACL")
	check(st.Aversion == 1, "aversion %d after SetACL", st.Aversion)
	_, err = other.Sync(p)
	must(err, "sync")
	data, _, err = other.Get(p)
	must(err, "get with world READ")
	check(string(data) == "s", "data %q", data)
	acl, st, err = other.GetACL(p)
	must(err, "GetACL with READ")
	masked := []zk.ACL{{Perms: zk.PermRead, Scheme: "world", ID: "anyone"}, {Perms: zk.PermAll, Scheme: "digest", ID: "alice:x"}}
	check(reflect.DeepEqual(acl, masked) && st.Aversion == 1, "ACL seen without ADMIN %+v (aversion %d), want %+v", acl, st.Aversion, masked)
	_, err = other.Set(p, nil, -1)
	expectErr(err, zk.ErrNoAuth, "set with READ only")

	// A wrong password adds an identity that matches nothing.
	must(other.AddAuth("digest", []byte("alice:wrong")), "AddAuth with a wrong password")
	_, err = other.Set(p, nil, -1)
	expectErr(err, zk.ErrNoAuth, "set with a wrong password")
	// The right one, added later, works; deleting needs DELETE on the parent (world here).
	must(other.AddAuth("digest", []byte("alice:secret")), "AddAuth")
	_, err = other.Set(p, []byte("t"), -1)
	must(err, "set after auth")
	_, err = owner.Create(q+"/kid", nil, 0, open)
	must(err, "create kid")
	must(other.Delete(q+"/kid", -1), "delete with DELETE on the parent via digest")

	// An unknown scheme: AUTHFAILED, the server closes the connection; the session goes on.
	sid := other.SessionID()
	err = other.AddAuth("nosuch", []byte("x"))
	expectErr(err, zk.ErrAuthFailed, "AddAuth with an unknown scheme")
	_, err = other.Sync(base)
	for err == zk.ErrConnectionClosed || err == zk.ErrNoServer {
		time.Sleep(50 * time.Millisecond)
		_, err = other.Sync(base)
	}
	must(err, "sync after AUTHFAILED")
	other.waitSession("reconnection after AUTHFAILED")
	check(other.SessionID() == sid, "session changed after AUTHFAILED: %#x -> %#x", sid, other.SessionID())
	check(other.sawState(zk.StateDisconnected), "no disconnection after AUTHFAILED")
	// Credentials are re-sent on reconnection (alice:secret was).
	_, err = other.Set(p, []byte("u"), -1)
	must(err, "set with credentials re-sent after reconnection")
}

// scenarioExistsWithoutRead: exists needs no permission in ZooKeeper 3.8, only the node.
func scenarioExistsWithoutRead(e *env) {
	owner := connect("owner", e.rotate(0), 10*time.Second)
	defer owner.Close()
	other := connect("other", e.rotate(1), 10*time.Second)
	defer other.Close()
	must(owner.AddAuth("digest", []byte("alice:secret")), "AddAuth")
	base := mkbase(owner, "exists")
	p, err := owner.Create(base+"/private", []byte("s"), 0, zk.DigestACL(zk.PermAll, "alice", "secret"))
	must(err, "create with a digest ACL")
	_, err = other.Sync(p)
	must(err, "sync")
	ok, st, err := other.Exists(p)
	must(err, "exists on a node without READ for this session")
	check(ok && st.DataLength == 1 && st.Version == 0, "exists: %v %+v", ok, *st)
	ok, _, _, err = other.ExistsW(p)
	must(err, "ExistsW on a node without READ for this session")
	check(ok, "ExistsW: false")
}
