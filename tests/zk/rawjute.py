"""The harness of tests/zk/test_raw_replies.py: jute encoding, a decoder that prints every reply
field by field, and the transcripts that are compared (see that file's docstring).

The cases live in raw_cases_nodes.py and raw_cases_sessions.py, registered in CASES.
"""

import base64
import hashlib
import os
import re
import socket
import struct
import time

SERVER = 1  # every connection of a case goes to this server of each cluster
REPLY_TIMEOUT = 5.0

OPS = {
    0: "notification", 1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
    6: "getACL", 7: "setACL", 8: "getChildren", 9: "sync", 11: "ping", 12: "getChildren2",
    13: "check", 14: "multi", 15: "create2", 16: "reconfig", 17: "checkWatches",
    18: "removeWatches", 19: "createContainer", 20: "deleteContainer", 21: "createTTL",
    22: "multiRead", 100: "auth", 101: "setWatches", 102: "sasl", 103: "getEphemerals",
    104: "getAllChildrenNumber", 105: "setWatches2", 106: "addWatch", 107: "whoAmI",
    -10: "createSession", -11: "closeSession", -1: "error",
}
ERRS = {
    0: "OK", -1: "SYSTEMERROR", -2: "RUNTIMEINCONSISTENCY", -3: "DATAINCONSISTENCY",
    -4: "CONNECTIONLOSS", -5: "MARSHALLINGERROR", -6: "UNIMPLEMENTED", -7: "OPERATIONTIMEOUT",
    -8: "BADARGUMENTS", -12: "UNKNOWNSESSION", -13: "NEWCONFIGNOQUORUM", -14: "RECONFIGINPROGRESS",
    -101: "NONODE", -102: "NOAUTH", -103: "BADVERSION", -108: "NOCHILDRENFOREPHEMERALS",
    -110: "NODEEXISTS", -111: "NOTEMPTY", -112: "SESSIONEXPIRED", -113: "INVALIDCALLBACK",
    -114: "INVALIDACL", -115: "AUTHFAILED", -118: "SESSIONMOVED", -119: "NOTREADONLY",
    -120: "EPHEMERALONLOCALSESSION", -121: "NOWATCHER", -122: "REQUESTTIMEOUT",
    -123: "RECONFIGDISABLED", -124: "SESSIONCLOSEDREQUIRESASLAUTH", -125: "QUOTAEXCEEDED",
    -127: "THROTTLEDOP",
}
WRITE_OPS = {1, 2, 5, 7, 14, 15, 16, 19, 20, 21, -11}  # a reply to these carries a zxid of its own
EVENTS = {-1: "None", 1: "NodeCreated", 2: "NodeDeleted", 3: "NodeDataChanged", 4: "NodeChildrenChanged",
          5: "DataWatchRemoved", 6: "ChildWatchRemoved", 7: "PersistentWatchRemoved"}


# ---------------------------------------------------------------- encoding

def jint(v):
    return struct.pack("!i", v)


def jlong(v):
    return struct.pack("!q", v)


def jbool(v):
    return b"\1" if v else b"\0"


def jstr(s):
    """A ustring: None is null (-1); str is UTF-8; bytes are sent as they are (e.g. CESU-8)."""
    if s is None:
        return jint(-1)
    b = s.encode() if isinstance(s, str) else s
    return jint(len(b)) + b


jbuf = jstr


def jacl(acl):
    """acl: list of (perms, scheme, id); None is a null vector."""
    if acl is None:
        return jint(-1)
    return jint(len(acl)) + b"".join(jint(p) + jstr(s) + jstr(i) for p, s, i in acl)


def jvec(items):
    if items is None:
        return jint(-1)
    return jint(len(items)) + b"".join(jstr(x) for x in items)


OPEN = [(31, "world", "anyone")]
READ_ONLY = [(1, "world", "anyone")]


def digest_id(user, password):
    h = hashlib.sha1(("%s:%s" % (user, password)).encode()).digest()
    return "%s:%s" % (user, base64.b64encode(h).decode())


def create_req(path, data=b"", acl=OPEN, flags=0):
    return jstr(path) + jbuf(data) + jacl(acl) + jint(flags)


def create_ttl_req(path, data=b"", acl=OPEN, flags=5, ttl=10 ** 9):
    return create_req(path, data, acl, flags) + jlong(ttl)


def path_watch(path, watch=False):
    return jstr(path) + jbool(watch)


def multi_req(ops):
    """ops: list of (type, record bytes); the terminator is appended."""
    return b"".join(struct.pack("!iBi", ty, 0, -1) + body for ty, body in ops) + struct.pack("!iBi", -1, 1, -1)


def auth_req(scheme, auth):
    return jint(0) + jstr(scheme) + jbuf(auth)


# ---------------------------------------------------------------- decoding

class Short(Exception):
    pass


class Decoder:
    """Decodes one reply body field by field into normalised `name=value` strings."""

    def __init__(self, tr, data, config=False):
        self.tr = tr
        self.b = data
        self.i = 0
        self.out = []
        self.config = config
        self.config_len = None

    def take(self, n):
        if self.i + n > len(self.b):
            raise Short()
        v = self.b[self.i:self.i + n]
        self.i += n
        return v

    def int(self):
        return struct.unpack("!i", self.take(4))[0]

    def long(self):
        return struct.unpack("!q", self.take(8))[0]

    def put(self, name, value):
        self.out.append("%s=%s" % (name, value))

    def f_int(self, name):
        v = self.int()
        self.put(name, v)
        return v

    def raw_bytes(self):
        n = self.int()
        if n == -1:
            return None
        if n < 0:
            raise Short()
        return self.take(n)

    def f_str(self, name):
        v = self.raw_bytes()
        self.put(name, "null(-1)" if v is None else repr(v))
        return v

    def f_data(self, name):
        v = self.raw_bytes()
        if v is None:
            self.put(name, "null(-1)")
        elif self.config:
            self.put(name, "config[%d bytes]%r" % (len(v), normalise_config(v)))
        else:
            self.put(name, repr(v))
        return v

    def f_zxid(self, name):
        self.put(name, self.tr.zxid(self.long()))

    def f_time(self, name):
        v = self.long()
        self.put(name, "TIME" if v != 0 else 0)

    def f_stat(self, prefix="stat."):
        self.f_zxid(prefix + "czxid")
        self.f_zxid(prefix + "mzxid")
        self.f_time(prefix + "ctime")
        self.f_time(prefix + "mtime")
        self.f_int(prefix + "version")
        self.f_int(prefix + "cversion")
        self.f_int(prefix + "aversion")
        self.put(prefix + "ephemeralOwner", self.tr.session(self.long()))
        n = self.int()
        if self.config and n > 0 and (self.config_len is None or n == self.config_len):
            n = "<config length>"
        self.put(prefix + "dataLength", n)
        self.f_int(prefix + "numChildren")
        self.f_zxid(prefix + "pzxid")

    def f_strings(self, name, sort=True):
        n = self.int()
        if n < 0:
            self.put(name, "null(%d)" % n)
            return
        items = [self.raw_bytes() for _ in range(n)]
        shown = sorted(items, key=lambda x: (x is None, x or b"")) if sort else items
        self.put(name, "[%d]%s" % (n, "[" + ", ".join("null" if x is None else repr(x) for x in shown) + "]"))

    def f_acls(self, name="acl"):
        n = self.int()
        if n < 0:
            self.put(name, "null(%d)" % n)
            return
        acls = []
        for _ in range(n):
            perms = self.int()
            scheme = self.raw_bytes()
            ident = self.raw_bytes()
            acls.append("(%d,%r,%r)" % (perms, scheme, ident))
        self.put(name, "[%d][%s]" % (n, ", ".join(acls)))

    def f_clientinfos(self):
        n = self.int()
        if n < 0:
            self.put("clientInfo", "null(%d)" % n)
            return
        infos = sorted("(%r,%r)" % (self.raw_bytes(), self.raw_bytes()) for _ in range(n))
        self.put("clientInfo", "[%d][%s]" % (n, ", ".join(infos)))  # sorted: ZooKeeper's is a set

    def body(self, op):
        if op == 1 or op == 9:
            self.f_str("path")
        elif op in (15, 19, 21):
            self.f_str("path")
            self.f_stat()
        elif op in (3, 5, 7):
            self.f_stat()
        elif op in (4, 16):
            if self.config:
                self.config_len = struct.unpack_from("!i", self.b, self.i)[0] if len(self.b) >= self.i + 4 else None
            self.f_data("data")
            self.f_stat()
        elif op == 6:
            self.f_acls()
            self.f_stat()
        elif op == 8:
            self.f_strings("children")
        elif op == 12:
            self.f_strings("children")
            self.f_stat()
        elif op in (14, 22):
            self.multi()
        elif op == 102:
            self.f_data("token")
        elif op == 103:
            self.f_strings("ephemerals")
        elif op == 104:
            self.f_int("totalNumber")
        elif op == 106:
            self.f_int("ErrorResponse.err")
        elif op == 107:
            self.f_clientinfos()

    def multi(self):
        k = 0
        while True:
            ty, done, err = struct.unpack("!iBi", self.take(9))
            head = "result[%d]" % k
            if done:
                self.out.append("%s: end MultiHeader(type=%d, done=%d, err=%d)" % (head, ty, done, err))
                return
            self.out.append("%s: MultiHeader(type=%d %s, done=%d, err=%d %s)" % (
                head, ty, OPS.get(ty, "?"), done, err, ERRS.get(err, "?")))
            if ty == -1:
                self.f_int("  ErrorResponse.err")
            elif ty == 1:
                self.f_str("  path")
            elif ty == 15:
                self.f_str("  path")
                self.f_stat("  stat.")
            elif ty == 5:
                self.f_stat("  stat.")
            elif ty == 8:
                self.f_strings("  children")
            elif ty == 4:
                self.f_data("  data")
                self.f_stat("  stat.")
            elif ty not in (2, 13):
                self.out.append("  unknown result type: rest=%s" % self.b[self.i:].hex())
                self.i = len(self.b)
                return
            k += 1

    def decode(self, op):
        try:
            self.body(op)
        except Short:
            self.out.append("TRUNCATED at byte %d of %d: %s" % (self.i, len(self.b), self.b.hex()))
            self.i = len(self.b)
        if self.i < len(self.b):
            self.out.append("TRAILING %d bytes: %s" % (len(self.b) - self.i, self.b[self.i:].hex()))
        return self.out


def normalise_config(text):
    """/zookeeper/config: keep the format, not the addresses, ports or version."""
    s = text.decode(errors="replace")
    s = re.sub(r"\d+\.\d+\.\d+\.\d+", "<ip>", s)
    s = re.sub(r"(?<=:)\d+", "<port>", s)
    s = re.sub(r"(?m)^version=[0-9a-fA-F]+$", "version=<hex>", s)
    return s


# ---------------------------------------------------------------- connections and transcripts

class Transcript:
    """One case's run on one cluster: the normalised lines that are compared."""

    def __init__(self, target, port):
        self.target = target
        self.port = port
        self.lines = []
        self.zxids = {}
        self.sessions = {}
        self.conns = []

    def log(self, line):
        self.lines.append(line)

    def zxid(self, z, new=True):
        """Z1, Z2, ... by first appearance. Only a write's reply and a Stat bring a new zxid; any
        other reply (a read, ping, auth, setWatches) carrying a zxid not seen yet shows where it
        falls instead, so that a server which moves its zxid on a read does not renumber the rest."""
        if z <= 0:
            return z
        if z in self.zxids:
            return self.zxids[z]
        if new:
            self.zxids[z] = "Z%d" % (len(self.zxids) + 1)
            return self.zxids[z]
        below = [k for k in self.zxids if k < z]
        if not below:
            return "Z(unseen, below all)" if self.zxids else "Z(unseen)"
        if len(below) == len(self.zxids):
            # Above every zxid of the case: the server's last zxid, which other sessions' work
            # moves on (synod replicates session liveness, so it moves while a case runs; so it
            # does on ZooKeeper when another client writes). What a client can rely on is that
            # it is not below what it has seen: shown as the latest zxid of the case.
            return self.zxids[max(below)]
        return "Z(unseen, above %s)" % self.zxids[max(below)]

    def session(self, sid):
        if sid == 0:
            return 0
        return self.sessions.get(sid, "S(unknown session)")

    def conn(self, name, **kw):
        c = Conn(self, name, self.port, **kw)
        self.conns.append(c)
        return c

    def cleanup(self):
        """Close every session the case opened, unrecorded, so none expires during a later case."""
        for c in self.conns:
            c.shutdown()
        done = set()
        for c in self.conns:
            if c.sid and c.sid not in done and c.passwd:
                done.add(c.sid)
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=REPLY_TIMEOUT)
                    req = struct.pack("!iqiq", 0, 0, 10000, c.sid) + jbuf(c.passwd) + b"\0"
                    s.sendall(jint(len(req)) + req)
                    resp = recv_frame(s)
                    if resp is not None and struct.unpack_from("!i", resp, 4)[0] > 0:
                        s.sendall(jint(8) + struct.pack("!ii", 1, -11))
                        while True:
                            f = recv_frame(s)
                            if f is None or struct.unpack_from("!i", f, 0)[0] == 1:
                                break
                    s.close()
                except OSError:
                    pass


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(s):
    """A frame, or None when the peer closed (EOF or reset). socket.timeout propagates."""
    try:
        head = recv_exact(s, 4)
        if head is None:
            return None
        (n,) = struct.unpack("!i", head)
        return recv_exact(s, n)
    except socket.timeout:
        raise
    except OSError:
        return None


class Conn:
    """A raw client connection whose every request, reply and event goes into the transcript."""

    def __init__(self, tr, name, port, timeout_ms=10000, session=0, passwd=b"\0" * 16, last_zxid=0,
                 read_only=False, protocol_version=0, owner=None):
        self.tr = tr
        self.name = name
        self.xid = 0
        self.closed = False
        self.sid = 0
        self.passwd = None
        self.s = socket.create_connection(("127.0.0.1", port), timeout=REPLY_TIMEOUT)
        req = struct.pack("!iqiq", protocol_version, last_zxid, timeout_ms, session) + jbuf(passwd)
        if read_only is not None:
            req += jbool(read_only)
        tr.log("%s> CONNECT protocolVersion=%d lastZxidSeen=%s timeOut=%d sessionId=%s passwd=%s readOnly=%s" % (
            name, protocol_version, "LAST" if last_zxid else 0, timeout_ms,
            tr.session(session) if session else 0, "zeros[16]" if passwd == b"\0" * 16 else "given[%d]" % len(passwd),
            "absent" if read_only is None else int(read_only)))
        self.send(req)
        try:
            resp = recv_frame(self.s)
        except socket.timeout:
            tr.log("%s< no ConnectResponse within %ss" % (name, REPLY_TIMEOUT))
            self.closed = True
            return
        if resp is None:
            tr.log("%s< connection CLOSED without a ConnectResponse" % name)
            self.closed = True
            return
        fields = []
        try:
            pv, to, sid = struct.unpack_from("!iiq", resp, 0)
            (plen,) = struct.unpack_from("!i", resp, 16)
            pw = resp[20:20 + plen]
            rest = resp[20 + plen:]
            if sid and sid not in tr.sessions:
                tr.sessions[sid] = "S(%s)" % (owner or name)
            self.sid = sid
            self.passwd = pw
            fields += ["protocolVersion=%d" % pv, "timeOut=%d" % to, "sessionId=%s" % tr.session(sid)]
            if pw == b"\0" * len(pw):
                fields.append("passwd=zeros[%d]" % plen)
            else:
                fields.append("passwd=PW(%s)[%d]" % (tr.session(sid), plen))
            if len(rest) == 0:
                fields.append("readOnly=absent")
            elif len(rest) == 1:
                fields.append("readOnly=%d" % rest[0])
            else:
                fields.append("readOnly=%d TRAILING %s" % (rest[0], rest[1:].hex()))
        except struct.error:
            fields.append("UNDECODABLE %s" % resp.hex())
        tr.log("%s< CONNECT frame_len=%d %s" % (name, len(resp), " ".join(fields)))

    def send(self, body):
        self.s.sendall(jint(len(body)) + body)

    def event_line(self, frame):
        xid, zxid, err = struct.unpack_from("!iqi", frame, 0)
        d = Decoder(self.tr, frame[16:])
        try:
            ty, state = struct.unpack_from("!ii", frame, 16)
            d.i = 8
            path = d.raw_bytes()
            rest = frame[16 + d.i:]
            return "%s< EVENT [xid=%d zxid=%s err=%d] type=%d %s state=%d path=%r%s" % (
                self.name, xid, self.tr.zxid(zxid, new=False), err, ty, EVENTS.get(ty, "?"), state, path,
                " TRAILING " + rest.hex() if rest else "")
        except (struct.error, Short):
            return "%s< EVENT UNDECODABLE %s" % (self.name, frame.hex())

    def read_reply(self):
        """Frames up to the first that is not a notification; events are logged on the way."""
        while True:
            try:
                frame = recv_frame(self.s)
            except socket.timeout:
                return "timeout"
            if frame is None:
                return None
            if len(frame) >= 4 and struct.unpack_from("!i", frame, 0)[0] == -1:
                self.tr.log(self.event_line(frame))
                continue
            return frame

    def req(self, op, body=b"", xid=None, label="", probe=True, config=False, mask=False):
        """Send one request, log it, its reply decoded, the events before it, then probe the connection."""
        if xid is None:
            self.xid += 1
            xid = self.xid
        self.tr.log("%s> xid=%d op=%d %s %s" % (self.name, xid, op, OPS.get(op, "?"), label))
        if self.closed:
            self.tr.log("%s  (connection closed: not sent)" % self.name)
            return None, None
        try:
            self.send(struct.pack("!ii", xid, op) + body)
        except OSError:
            self.tr.log("%s  send failed: connection CLOSED" % self.name)
            self.closed = True
            return None, None
        frame = self.read_reply()
        if frame == "timeout":
            self.tr.log("%s< NO REPLY within %ss" % (self.name, REPLY_TIMEOUT))
            err, rbody = None, None
        elif frame is None:
            self.tr.log("%s< connection CLOSED, no reply" % self.name)
            self.closed = True
            return None, None
        else:
            rxid, zxid, err = struct.unpack_from("!iqi", frame, 0)
            rbody = frame[16:]
            head = "%s< xid=%d zxid=%s err=%d %s" % (
                self.name, rxid, self.tr.zxid(zxid, new=op in WRITE_OPS), err, ERRS.get(err, "?"))
            if err == 0 and mask:
                fields = ["body of %d bytes (not compared)" % len(rbody)]
            elif err == 0:
                fields = Decoder(self.tr, rbody, config=config).decode(op)
            else:
                fields = ["BODY ON ERROR %d bytes: %s" % (len(rbody), rbody.hex())] if rbody else []
            if len(fields) <= 3 and not any(f.startswith("result[") for f in fields):
                self.tr.log(head + (" | " + ", ".join(fields) if fields else ""))
            else:
                self.tr.log(head + " |")
                for f in fields:
                    self.tr.log("%s<     %s" % (self.name, f))
        if probe and op == -11:
            # After closeSession the server closes the socket on its own, and a ping sent right away
            # races with that: wait for the close first.
            self.drain(1.0)
        if probe:
            self.probe()
        return err, rbody

    def probe(self):
        """Is the connection still open? A ping answers; events queued before it are logged."""
        if self.closed:
            return
        try:
            self.send(struct.pack("!ii", -2, 11))
        except OSError:
            self.tr.log("%s  connection CLOSED" % self.name)
            self.closed = True
            return
        frame = self.read_reply()
        if frame == "timeout":
            self.tr.log("%s  ping unanswered within %ss" % (self.name, REPLY_TIMEOUT))
        elif frame is None:
            self.tr.log("%s  connection CLOSED" % self.name)
            self.closed = True
        elif struct.unpack_from("!i", frame, 0)[0] == -2:
            self.tr.log("%s  connection open" % self.name)
        else:
            self.tr.log("%s  unexpected frame instead of the ping reply: %s" % (self.name, frame.hex()))

    def drain(self, seconds=0.3):
        """Log the events that arrive within `seconds` without sending anything."""
        if self.closed:
            return
        deadline = time.time() + seconds
        try:
            while True:
                self.s.settimeout(max(0.001, deadline - time.time()))
                frame = recv_frame(self.s)
                if frame is None:
                    self.tr.log("%s  connection CLOSED" % self.name)
                    self.closed = True
                    return
                if struct.unpack_from("!i", frame, 0)[0] == -1:
                    self.tr.log(self.event_line(frame))
                else:
                    self.tr.log("%s< unsolicited frame %s" % (self.name, frame.hex()))
        except socket.timeout:
            pass
        finally:
            self.s.settimeout(REPLY_TIMEOUT)

    def shutdown(self):
        try:
            self.s.close()
        except OSError:
            pass

    # shorthands
    def create(self, path, data=b"", acl=OPEN, flags=0, op=1, **kw):
        lab = "path=%r data=%r acl=%r flags=%d" % (path, data, acl, flags)
        return self.req(op, create_req(path, data, acl, flags), label=lab, **kw)

    def create_ttl(self, path, data=b"", acl=OPEN, flags=5, ttl=10 ** 9, **kw):
        lab = "path=%r data=%r acl=%r flags=%d ttl=%d" % (path, data, acl, flags, ttl)
        return self.req(21, create_ttl_req(path, data, acl, flags, ttl), label=lab, **kw)

    def delete(self, path, version=-1):
        return self.req(2, jstr(path) + jint(version), label="path=%r version=%d" % (path, version))

    def exists(self, path, watch=False):
        return self.req(3, path_watch(path, watch), label="path=%r watch=%s" % (path, watch))

    def get(self, path, watch=False):
        return self.req(4, path_watch(path, watch), label="path=%r watch=%s" % (path, watch),
                        config=path == "/zookeeper/config")

    def set(self, path, data, version=-1):
        return self.req(5, jstr(path) + jbuf(data) + jint(version),
                        label="path=%r data=%r version=%d" % (path, data, version))

    def get_acl(self, path):
        return self.req(6, jstr(path), label="path=%r" % (path,), config=path == "/zookeeper/config")

    def set_acl(self, path, acl, version=-1):
        return self.req(7, jstr(path) + jacl(acl) + jint(version), label="path=%r acl=%r version=%d" % (path, acl, version))

    def children(self, path, watch=False, op=8):
        return self.req(op, path_watch(path, watch), label="path=%r watch=%s" % (path, watch))

    def multi(self, ops, op=14, label=""):
        return self.req(op, multi_req(ops), label=label or "ops=%s" % [OPS.get(t, t) for t, _ in ops])

    def auth(self, scheme, auth, xid=-4):
        return self.req(100, auth_req(scheme, auth), xid=xid, label="scheme=%r auth=%r" % (scheme, auth))

    def add_watch(self, path, mode):
        return self.req(106, jstr(path) + jint(mode), label="path=%r mode=%d" % (path, mode))

    def check_watches(self, path, ty):
        return self.req(17, jstr(path) + jint(ty), label="path=%r type=%d" % (path, ty))

    def remove_watches(self, path, ty):
        return self.req(18, jstr(path) + jint(ty), label="path=%r type=%d" % (path, ty))

    def close_session(self):
        return self.req(-11, label="(no body)")



# ---------------------------------------------------------------- the case registry


CASES = {}


def case(name=None, xfail=None):
    def reg(fn):
        CASES[name or fn.__name__] = (fn, xfail)
        return fn
    return reg


def add(name, fn, xfail=None):
    CASES[name] = (fn, xfail)
