"""Raw jute cases (registered in rawjute.CASES): the handshake, node operations, ACLs, sync and ping."""

from rawjute import *  # noqa: F401,F403 (the encoders, Conn and the case registry)


# --- connect handshake

@case()
def connect_with_readonly_byte(t, p):
    a = t.conn("A", read_only=False)
    a.probe()


@case()
def connect_without_readonly_byte(t, p):
    a = t.conn("A", read_only=None)
    a.probe()


@case()
def connect_readonly_true(t, p):
    a = t.conn("A", read_only=True)
    a.probe()


@case()
def connect_timeout_below_min(t, p):
    t.conn("A", timeout_ms=100).probe()


@case()
def connect_timeout_above_max(t, p):
    t.conn("A", timeout_ms=10 ** 6).probe()


@case()
def connect_reattach_same_server(t, p):
    a = t.conn("A")
    a.create(p, b"x", flags=1)
    b = t.conn("B", session=a.sid, passwd=a.passwd, last_zxid=1, owner="A")
    b.exists(p)
    a.probe()


@case()
def connect_reattach_bad_password(t, p):
    a = t.conn("A")
    b = t.conn("B", session=a.sid, passwd=b"\1" * 16, owner="A")
    b.probe()
    a.probe()


@case()
def connect_reattach_closed_session(t, p):
    a = t.conn("A")
    sid, pw = a.sid, a.passwd
    a.close_session()
    b = t.conn("B", session=sid, passwd=pw, owner="A")
    b.probe()


@case()
def connect_zxid_ahead_of_server(t, p):
    a = t.conn("A", last_zxid=1 << 62)
    a.probe()


# --- create (1)

@case()
def create_persistent(t, p):
    a = t.conn("A")
    a.create(p, b"hello")
    a.get(p)


@case()
def create_existing(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p)
    a.get(p)


@case()
def create_no_parent(t, p):
    a = t.conn("A")
    a.create(p + "/a/b")


@case()
def create_root(t, p):
    t.conn("A").create("/")


@case()
def create_sequential(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/s-", flags=2)
    a.create(p + "/s-", flags=2)
    a.create(p + "/", flags=2)
    a.create(p + "/q", flags=0)
    a.delete(p + "/q")
    a.create(p + "/s-", flags=2)
    a.children(p, op=12)


@case()
def create_ephemeral(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/e", b"eph", flags=1)
    a.create(p + "/e/child")
    a.exists(p + "/e")


@case()
def create_ephemeral_sequential(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/e-", flags=3)
    a.req(15, create_req(p + "/e-", flags=3), label="create2 ephemeral sequential")


for _flags in (4, 5, 6, 7, -1, 100):
    def _bad_flags(t, p, flags=_flags):
        a = t.conn("A")
        a.create(p)
        a.create(p + "/x", flags=flags)
        a.exists(p + "/x")
    add("create_flags_%s" % str(_flags).replace("-", "minus"), _bad_flags)


_BAD_PATHS = {
    "noslash": "noslash", "empty": "", "null": None, "trailing_slash": "/raw/x/",
    "double_slash": "/raw//x", "dot": "/raw/.", "dotdot": "/raw/..", "nul": "/raw/a\0b",
    "ctrl_u0001": "/raw/a\x01b", "del_u007f": "/raw/a\x7fb", "u0085": "/raw/a\x85b",
    "private_use_ue000": "/raw/a\ue000b", "ufff0": "/raw/a\ufff0b", "ufffd": "/raw/a\ufffdb",
    "dotname_ok": "/raw/.a", "a_dotdot_b_ok": "/raw/a..b", "bmp_e_acute_ok": "/raw/caf\u00e9",
    "bmp_cjk_ok": "/raw/\u4e2d\u6587",
}
for _n, _path in _BAD_PATHS.items():
    def _create_path(t, p, path=_path):
        a = t.conn("A")
        a.create(path)
        a.exists(path)
        a.get(path)
    add("create_path_%s" % _n, _create_path)

# Characters outside the Basic Multilingual Plane: standard UTF-8 (4 bytes), and CESU-8 (two
# 3-byte surrogates: what the Java client's own encoder sends).
EMOJI_UTF8 = "\U0001F600".encode()
EMOJI_CESU8 = "".join(chr(c) for c in struct.unpack("!HH", "\U0001F600".encode("utf-16-be"))).encode("utf-8", "surrogatepass")


for _n, _enc in (("utf8", EMOJI_UTF8), ("cesu8", EMOJI_CESU8)):
    def _nonbmp(t, p, enc=_enc):
        a = t.conn("A")
        a.create(p)
        path = p.encode() + b"/" + enc
        a.create(path)
        a.req(15, create_req(path), label="create2 path=%r" % path)
        a.exists(path)
        a.get(path)
        a.children(p)
        a.delete(path)
        a.set(path, b"x")
    add("nonbmp_path_%s" % _n, _nonbmp)

    def _nonbmp_sync(t, p, enc=_enc):
        a = t.conn("A")
        path = p.encode() + b"/" + enc
        a.req(9, jstr(path), label="sync path=%r" % path)
    add("nonbmp_path_%s_sync" % _n, _nonbmp_sync)


# --- null data (-1)

@case()
def create_null_data_then_get(t, p):
    a = t.conn("A")
    a.create(p, None)
    a.get(p)
    a.exists(p)
    a.req(15, create_req(p + "2", None), label="create2 path=%r data=null" % (p + "2"))
    a.get(p + "2")


@case()
def set_null_data_then_get(t, p):
    a = t.conn("A")
    a.create(p, b"abc")
    a.set(p, None)
    a.get(p)
    a.set(p, b"")
    a.get(p)


@case()
def multi_create_null_data_then_get(t, p):
    a = t.conn("A")
    a.multi([(1, create_req(p, None)), (5, jstr(p) + jbuf(None) + jint(-1))])
    a.get(p)
    a.req(22, multi_req([(4, path_watch(p))]), label="multiRead getData")


# --- create2 (15), createContainer (19), createTTL (21)

@case()
def create2(t, p):
    a = t.conn("A")
    a.req(15, create_req(p, b"two"), label="create2 %r" % p)
    a.req(15, create_req(p + "/s-", flags=2), label="create2 sequential")
    a.req(15, create_req(p), label="create2 existing")
    a.req(15, create_req(p + "/x/y"), label="create2 no parent")
    a.exists(p)


@case()
def create_container(t, p):
    a = t.conn("A")
    a.create(p)
    a.req(19, create_req(p + "/c", b"box", flags=4), label="createContainer")
    a.exists(p + "/c")
    a.create(p + "/c/child")
    a.exists(p + "/c")
    a.req(19, create_req(p + "/c", flags=4), label="createContainer existing")


for _flags in (0, 1, 2, 5):
    def _container_flags(t, p, flags=_flags):
        a = t.conn("A")
        a.create(p)
        a.req(19, create_req(p + "/c", flags=flags), label="createContainer flags=%d" % flags)
        a.exists(p + "/c")
    add("create_container_flags_%d" % _flags, _container_flags)


@case()
def create_ttl(t, p):
    a = t.conn("A")
    a.create(p)
    a.create_ttl(p + "/t", b"ttl", flags=5, ttl=10 ** 9)
    a.create_ttl(p + "/s-", flags=6, ttl=10 ** 9)
    a.exists(p + "/t")
    a.create(p + "/t/child")
    a.create_ttl(p + "/t", flags=5)


for _n, _flags, _ttl in (("ttl_0", 5, 0), ("ttl_minus1", 5, -1), ("ttl_2pow40", 5, 1 << 40),
                         ("ttl_max", 5, (1 << 40) - 1), ("flags_0", 0, 1000), ("flags_1", 1, 1000),
                         ("flags_4", 4, 1000)):
    # Not sent: createTTL with flags 0 and ttl -1. ZooKeeper 3.8.0 accepts it, then every server
    # dies applying the txn (the ensemble is gone); synod answers BADARGUMENTS.
    def _ttl(t, p, flags=_flags, ttl=_ttl):
        a = t.conn("A")
        a.create(p)
        a.create_ttl(p + "/t", flags=flags, ttl=ttl)
        a.exists(p + "/t")
    add("create_ttl_%s" % _n, _ttl)


# --- delete (2)

@case()
def delete(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/c")
    a.delete(p + "/c", 5)
    a.delete(p)
    a.delete(p + "/c", 0)
    a.delete(p + "/c")
    a.delete(p, -1)
    a.delete(p)
    a.delete(p + "/none/x")


for _n, _path in (("root", "/"), ("zookeeper", "/zookeeper"), ("quota", "/zookeeper/quota"),
                  ("config", "/zookeeper/config"), ("empty", ""), ("noslash", "noslash"),
                  ("trailing_slash", "/raw/"), ("null", None)):
    def _del(t, p, path=_path):
        t.conn("A").delete(path)
    add("delete_%s" % _n, _del)


# --- exists (3), getData (4), setData (5)

@case()
def exists(t, p):
    a = t.conn("A")
    a.create(p, b"12345")
    a.exists(p)
    a.exists(p + "/none")
    a.exists("/raw/a\0b")
    a.exists("")
    a.exists("noslash")
    a.exists("/zookeeper")
    a.exists("/zookeeper/quota")


@case()
def exists_watch_fires_on_create(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    a.exists(p + "/n", watch=True)
    b.create(p + "/n", b"new")
    a.probe()
    b.set(p + "/n", b"again")
    a.probe()


@case()
def get_data(t, p):
    a = t.conn("A")
    a.create(p, b"\x00\x01binary\xff")
    a.get(p)
    a.get(p + "/none")
    a.get("/zookeeper")
    a.get("/zookeeper/quota")


@case()
def get_data_root_empty_path(t, p):
    a = t.conn("A")
    a.get("")
    a.get("/")
    a.children("")
    a.get_acl("")


@case()
def get_data_null_path(t, p):
    a = t.conn("A")
    a.get(None)


@case()
def get_data_zookeeper_config(t, p):
    a = t.conn("A")
    a.get("/zookeeper/config")
    a.get_acl("/zookeeper/config")
    a.set("/zookeeper/config", b"x")


@case()
def get_data_watch(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p, b"v0")
    a.get(p, watch=True)
    a.get(p + "/none", watch=True)
    b.create(p + "/none")
    b.set(p, b"v1")
    a.probe()
    a.get(p, watch=True)
    a.set(p, b"v2")
    a.get(p, watch=True)
    b.delete(p)
    a.probe()


@case()
def set_data(t, p):
    a = t.conn("A")
    a.create(p, b"a")
    a.set(p, b"b")
    a.set(p, b"b", 1)
    a.set(p, b"c", 7)
    a.set(p + "/none", b"x")
    a.set("noslash", b"x")
    a.get(p)


# --- getACL (6), setACL (7), ACL validation

@case()
def get_acl(t, p):
    a = t.conn("A")
    a.create(p, acl=[(31, "world", "anyone"), (1, "ip", "127.0.0.1")])
    a.get_acl(p)
    a.get_acl(p + "/none")
    a.get_acl("/")
    a.get_acl("/zookeeper")


@case()
def get_acl_digest_masked(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.auth("digest", b"alice:secret")
    a.create(p, acl=[(1, "world", "anyone"), (31, "digest", digest_id("alice", "secret"))])
    a.get_acl(p)
    b.get_acl(p)
    b.get(p)
    b.set(p, b"x")


@case()
def set_acl(t, p):
    a = t.conn("A")
    a.create(p)
    a.set_acl(p, [(31, "world", "anyone"), (31, "world", "anyone")], 0)
    a.get_acl(p)
    a.set_acl(p, READ_ONLY, 0)
    a.set_acl(p, READ_ONLY, 1)
    a.set_acl(p + "/none", OPEN)
    a.get_acl(p)
    a.set(p, b"x")


_ACLS = {
    "ip_not_an_ip": [(31, "ip", "not-an-ip")],
    "ip_cidr": [(31, "ip", "10.0.0.0/8")],
    "ip_bad_cidr": [(31, "ip", "10.0.0.0/99")],
    "ip_v6": [(31, "ip", "::1")],
    "perms_63": [(63, "world", "anyone")],
    "perms_0": [(0, "world", "anyone")],
    "perms_minus1": [(-1, "world", "anyone")],
    "unknown_scheme": [(31, "foo", "bar")],
    "world_someone": [(31, "world", "someone")],
    "digest_no_colon": [(31, "digest", "alice")],
    "digest_ok": [(31, "digest", digest_id("alice", "secret"))],
    "auth_without_auth": [(31, "auth", "")],
    "auth_null_id": [(31, "auth", None)],
    "empty_list": [],
    "null_list": None,
    "super_scheme": [(31, "super", "x")],
}
for _n, _acl in _ACLS.items():
    def _create_acl(t, p, acl=_acl):
        a = t.conn("A")
        a.create(p)
        a.create(p + "/n", acl=acl)
        a.get_acl(p + "/n")

    def _set_acl(t, p, acl=_acl):
        a = t.conn("A")
        a.create(p)
        a.set_acl(p, acl)
        a.get_acl(p)
    add("acl_create_%s" % _n, _create_acl)
    add("acl_set_%s" % _n, _set_acl)


@case()
def acl_auth_scheme_with_digest(t, p):
    a = t.conn("A")
    a.auth("digest", b"bob:pw")
    a.auth("digest", b"carol:pw")
    a.create(p, acl=[(31, "auth", "")])
    a.get_acl(p)
    a.set_acl(p, [(5, "auth", "ignored")])
    a.get_acl(p)


# --- getChildren (8), getChildren2 (12)

@case()
def get_children(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/b")
    a.create(p + "/a")
    a.children(p)
    a.children(p, op=12)
    a.children(p + "/a", op=12)
    a.children(p + "/none")
    a.children(p + "/none", op=12)
    a.children("/zookeeper")


@case()
def get_children_watch(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    a.children(p, watch=True)
    a.children(p + "/none", watch=True)
    b.create(p + "/c")
    a.probe()
    a.children(p, watch=True, op=12)
    b.delete(p + "/c")
    a.probe()
    a.children(p, watch=True)
    b.delete(p)
    a.probe()


# --- sync (9), ping (11)

@case()
def sync(t, p):
    a = t.conn("A")
    a.create(p)
    for path in (p, p + "/none", "", "noslash", None, "/raw//x"):
        a.req(9, jstr(path), label="path=%r" % (path,))


@case()
def ping(t, p):
    a = t.conn("A")
    a.req(11, xid=-2, label="(no body)")
    a.req(11, xid=5, label="ping with xid 5")
    a.req(11, b"extra", xid=-2, label="ping with a body")
