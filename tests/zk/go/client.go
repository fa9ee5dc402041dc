// Clients with a captured handshake, and raw session requests.
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// ---------------------------------------------------------------- clients

// handshake is a ConnectResponse as read off the wire by the client's connection.
type handshake struct {
	server    string
	timeoutMs int32
	sessionID int64
	passwd    []byte
}

// client wraps zk.Conn: it records every event and every ConnectResponse, keeps the servers in
// the given order (the library shuffles them), and can cut itself off the network.
type client struct {
	*zk.Conn
	name string

	mu         sync.Mutex
	events     []zk.Event
	handshakes []handshake
	conns      []net.Conn
	blocked    bool
	requests   []string // servers sent a ConnectRequest, in order
}

// orderedHosts is a HostProvider that tries the servers in the given order.
type orderedHosts struct {
	mu      sync.Mutex
	servers []string
	curr    int
	last    int
}

func (h *orderedHosts) Init([]string) error { h.curr, h.last = -1, -1; return nil }
func (h *orderedHosts) Len() int            { return len(h.servers) }
func (h *orderedHosts) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retry := h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retry
}
func (h *orderedHosts) Connected() { h.mu.Lock(); h.last = h.curr; h.mu.Unlock() }

type logger struct{ name string }

func (l logger) Printf(format string, args ...interface{}) {
	logf("[%s] %s", l.name, fmt.Sprintf(format, args...))
}

// capConn parses the first frame each way: the ConnectRequest the client sends (logged) and
// the ConnectResponse the server answers (logged and kept).
type capConn struct {
	net.Conn
	c    *client
	buf  []byte
	done bool
	sent bool
}

func (cc *capConn) Write(p []byte) (int, error) {
	if !cc.sent && len(p) >= 4+28 {
		cc.sent = true
		cc.c.mu.Lock()
		cc.c.requests = append(cc.c.requests, cc.Conn.RemoteAddr().String())
		cc.c.mu.Unlock()
		b := p[4:]
		logf("[%s] ConnectRequest to %s: lastZxidSeen %#x timeOut %d sessionId %#x",
			cc.c.name, cc.Conn.RemoteAddr(), binary.BigEndian.Uint64(b[4:]),
			int32(binary.BigEndian.Uint32(b[12:])), binary.BigEndian.Uint64(b[16:]))
	}
	return cc.Conn.Write(p)
}

func (cc *capConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if !cc.done && n > 0 {
		cc.buf = append(cc.buf, p[:n]...)
		if len(cc.buf) >= 4 {
			l := int(binary.BigEndian.Uint32(cc.buf))
			if len(cc.buf) >= 4+l && l >= 20 {
				b := cc.buf[4:]
				plen := int(int32(binary.BigEndian.Uint32(b[16:])))
				hs := handshake{
					server:    cc.Conn.RemoteAddr().String(),
					timeoutMs: int32(binary.BigEndian.Uint32(b[4:])),
					sessionID: int64(binary.BigEndian.Uint64(b[8:])),
				}
				if plen > 0 && 20+plen <= len(b) {
					hs.passwd = append([]byte(nil), b[20:20+plen]...)
				}
				logf("[%s] ConnectResponse from %s: timeOut %d sessionId %#x", cc.c.name, hs.server, hs.timeoutMs, uint64(hs.sessionID))
				cc.c.mu.Lock()
				cc.c.handshakes = append(cc.c.handshakes, hs)
				cc.c.mu.Unlock()
				cc.done = true
			}
		}
	}
	return n, err
}

func (c *client) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c.mu.Lock()
	blocked := c.blocked
	c.mu.Unlock()
	if blocked {
		return nil, fmt.Errorf("%s: blocked by the test", address)
	}
	conn, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.conns = append(c.conns, conn)
	c.mu.Unlock()
	return &capConn{Conn: conn, c: c}, nil
}

// block cuts the client off: its connection is closed and it cannot connect again until unblock.
func (c *client) block() {
	c.mu.Lock()
	c.blocked = true
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
}

func (c *client) unblock() { c.mu.Lock(); c.blocked = false; c.mu.Unlock() }

// drop closes the client's connection; it reconnects at once to the next server of its list.
func (c *client) drop() {
	c.mu.Lock()
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
}

// sentConnectRequests counts the ConnectRequests sent to server.
func (c *client) sentConnectRequests(server string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.requests {
		if s == server {
			n++
		}
	}
	return n
}

func connect(name string, servers []string, timeout time.Duration) *client {
	c := &client{name: name}
	conn, _, err := zk.Connect(servers, timeout,
		zk.WithHostProvider(&orderedHosts{servers: servers}),
		zk.WithDialer(c.dial),
		zk.WithLogger(logger{name}),
		zk.WithEventCallback(func(ev zk.Event) {
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		}))
	must(err, name+": Connect")
	c.Conn = conn
	c.waitSession("the first session")
	return c
}

func (c *client) waitSession(what string) {
	waitFor(c.name+": "+what, 20*time.Second, func() bool { return c.State() == zk.StateHasSession })
}

func (c *client) lastHandshake() handshake {
	c.mu.Lock()
	defer c.mu.Unlock()
	check(len(c.handshakes) > 0, "%s: no ConnectResponse seen", c.name)
	return c.handshakes[len(c.handshakes)-1]
}

// watchEvents returns the node events (not session-state ones) received so far.
func (c *client) watchEvents() []zk.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []zk.Event
	for _, ev := range c.events {
		if ev.Type != zk.EventSession && ev.Type != zk.EventNotWatching {
			out = append(out, ev)
		}
	}
	return out
}

func (c *client) states() []zk.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []zk.State
	for _, ev := range c.events {
		if ev.Type == zk.EventSession {
			out = append(out, ev.State)
		}
	}
	return out
}

func (c *client) sawState(s zk.State) bool {
	for _, st := range c.states() {
		if st == s {
			return true
		}
	}
	return false
}

var open = zk.WorldACL(zk.PermAll)

func mkbase(c *client, scenario string) string {
	p := fmt.Sprintf("/go-%s-%d", scenario, time.Now().UnixNano())
	_, err := c.Create(p, []byte("base"), 0, open)
	must(err, "create base "+p)
	return p
}

func expectEvent(ch <-chan zk.Event, typ zk.EventType, path, what string) zk.Event {
	select {
	case ev, ok := <-ch:
		check(ok, "%s: watch channel closed without an event", what)
		check(ev.Type == typ && ev.Path == path && ev.Err == nil,
			"%s: got event %v %q (err %v), want %v %q", what, ev.Type, ev.Path, ev.Err, typ, path)
		check(ev.State == zk.StateSyncConnected, "%s: event state %v, want StateSyncConnected", what, ev.State)
		return ev
	case <-time.After(10 * time.Second):
		failf("%s: no %v event within 10s", what, typ)
	}
	return zk.Event{}
}

func exists(c *client, p string) bool {
	ok, _, err := c.Exists(p)
	must(err, c.name+": Exists "+p)
	return ok
}

// ---------------------------------------------------------------- raw session requests

func jbytes(b []byte) []byte {
	out := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	copy(out[4:], b)
	return out
}

func writeFrame(conn net.Conn, body []byte) error {
	_, err := conn.Write(append(jbytes(body)[:4:4], body...))
	return err
}

func readFrame(conn net.Conn) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(conn, buf)
	return buf, err
}

// closeSessionFrom attaches (session, passwd) at server on a fresh connection and sends
// closeSession (opcode -11), as another process holding the credentials could.
func closeSessionFrom(server string, session int64, passwd []byte) {
	conn, err := net.DialTimeout("tcp", server, 5*time.Second)
	must(err, "raw dial "+server)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := make([]byte, 0, 64)
	req = binary.BigEndian.AppendUint32(req, 0)               // protocolVersion
	req = binary.BigEndian.AppendUint64(req, 0)               // lastZxidSeen
	req = binary.BigEndian.AppendUint32(req, 10000)           // timeOut
	req = binary.BigEndian.AppendUint64(req, uint64(session)) // sessionId
	req = append(req, jbytes(passwd)...)                      // passwd
	req = append(req, 0)                                      // readOnly
	must(writeFrame(conn, req), "raw connect")
	resp, err := readFrame(conn)
	must(err, "raw ConnectResponse")
	got := int64(binary.BigEndian.Uint64(resp[8:]))
	check(got == session, "raw re-attach at %s: session %#x, want %#x", server, got, session)
	hdr := binary.BigEndian.AppendUint32(nil, 1)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(0xfffffff5)) // -11 closeSession
	must(writeFrame(conn, hdr), "raw closeSession")
	for {
		r, err := readFrame(conn)
		if err != nil {
			// The server may close the connection instead of answering, e.g. when the client
			// re-attached the session elsewhere meanwhile (ZooKeeper does); whether the
			// session went is checked by the caller.
			logf("raw closeSession: no reply (%v)", err)
			return
		}
		xid := int32(binary.BigEndian.Uint32(r))
		if xid != 1 {
			continue // a watch event or ping
		}
		code := int32(binary.BigEndian.Uint32(r[12:]))
		check(code == 0, "closeSession answered %d", code)
		return
	}
}
