"""Raw jute cases (registered in rawjute.CASES): multi, auth, watches, sessions and invalid input."""

from rawjute import *  # noqa: F401,F403 (the encoders, Conn and the case registry)


# --- check (13) top level and inside multi; multi (14)

# Not sent: a top-level check (13). ZooKeeper 3.8.0 closes the connection without a reply, and
# its leader stops serving (the ensemble elects another); synod answers UNIMPLEMENTED and closes.


@case()
def multi_check(t, p):
    a = t.conn("A")
    a.create(p)
    a.multi([(13, jstr(p) + jint(0))])
    a.multi([(13, jstr(p) + jint(-1))])
    a.multi([(13, jstr(p) + jint(3))])
    a.multi([(13, jstr(p + "/none") + jint(-1))])


@case()
def multi_success(t, p):
    a = t.conn("A")
    a.create(p)
    a.multi([
        (1, create_req(p + "/a", b"1")),
        (15, create_req(p + "/b", b"2")),
        (19, create_req(p + "/c", flags=4)),
        (21, create_ttl_req(p + "/d", flags=5)),
        (1, create_req(p + "/s-", flags=2)),
        (15, create_req(p + "/s-", flags=2)),
        (5, jstr(p + "/a") + jbuf(b"11") + jint(0)),
        (13, jstr(p + "/a") + jint(1)),
        (2, jstr(p + "/b") + jint(-1)),
    ])
    a.children(p, op=12)


@case()
def multi_create2_only(t, p):
    a = t.conn("A")
    a.multi([(15, create_req(p, b"c2"))])
    a.exists(p)


@case()
def multi_failure(t, p):
    a = t.conn("A")
    a.create(p)
    a.multi([
        (1, create_req(p + "/a")),
        (5, jstr(p) + jbuf(b"x") + jint(-1)),
        (13, jstr(p) + jint(99)),
        (2, jstr(p + "/none") + jint(-1)),
        (1, create_req(p + "/b")),
    ])
    a.exists(p)
    a.exists(p + "/a")
    a.multi([(1, create_req(p + "/a")), (1, create_req(p + "/a"))])
    a.multi([(2, jstr(p) + jint(-1))])


@case()
def multi_empty(t, p):
    a = t.conn("A")
    a.multi([])
    a.req(22, multi_req([]), label="empty multiRead")


@case()
def multi_mixed_read_write(t, p):
    a = t.conn("A")
    a.create(p)
    a.multi([(1, create_req(p + "/a")), (4, path_watch(p))])
    a.exists(p + "/a")


@case()
def multi_bad_flags_inside(t, p):
    a = t.conn("A")
    a.create(p)
    a.multi([(1, create_req(p + "/a")), (1, create_req(p + "/b", flags=9))])
    a.exists(p + "/a")


@case()
def multi_bad_op_inside(t, p):
    a = t.conn("A")
    a.create(p)
    a.multi([(1, create_req(p + "/a")), (3, path_watch(p))])
    a.exists(p + "/a")


@case()
def multi_watch_events(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    a.create(p + "/x")
    b.get(p + "/x", watch=True)
    b.children(p, watch=True)
    b.exists(p + "/y", watch=True)
    a.multi([(5, jstr(p + "/x") + jbuf(b"1") + jint(-1)), (1, create_req(p + "/y")), (2, jstr(p + "/x") + jint(-1))])
    b.probe()


# --- multiRead (22)

@case()
def multi_read(t, p):
    a = t.conn("A")
    a.create(p, b"top")
    a.create(p + "/c", b"child")
    a.req(22, multi_req([(4, path_watch(p)), (8, path_watch(p)), (4, path_watch(p + "/none")),
                         (8, path_watch(p + "/none")), (4, path_watch(p + "/c", True))]), label="multiRead")
    a.set(p + "/c", b"changed")


@case()
def multi_read_with_write(t, p):
    a = t.conn("A")
    a.create(p)
    a.req(22, multi_req([(4, path_watch(p)), (1, create_req(p + "/a"))]), label="multiRead with a create")
    a.exists(p + "/a")


@case()
def multi_read_with_getchildren2(t, p):
    a = t.conn("A")
    a.create(p)
    a.req(22, multi_req([(12, path_watch(p))]), label="multiRead with getChildren2")


# --- auth (100), whoAmI (107), sasl (102)

@case()
def who_am_i(t, p):
    a = t.conn("A")
    a.req(107, label="(no body)")


for _n, _scheme, _auth in (("digest_good", "digest", b"alice:secret"), ("digest_no_colon", "digest", b"alicesecret"),
                           ("digest_empty", "digest", b""), ("digest_null", "digest", None),
                           ("digest_two_colons", "digest", b"a:b:c"), ("digest_latin1", "digest", b"\xe9t\xe9:pw"),
                           ("ip", "ip", b"127.0.0.1"), ("ip_empty", "ip", b""), ("unknown_scheme", "foo", b"bar"),
                           ("super", "super", b"x"), ("world", "world", b"anyone"), ("sasl", "sasl", b"x"),
                           ("null_scheme", None, b"x")):
    def _auth(t, p, scheme=_scheme, auth=_auth):
        a = t.conn("A")
        a.auth(scheme, auth)
        a.req(107, label="whoAmI")
    add("auth_%s" % _n, _auth)


@case()
def auth_twice_same_digest(t, p):
    a = t.conn("A")
    a.auth("digest", b"alice:secret")
    a.auth("digest", b"alice:secret")
    a.auth("digest", b"alice:other")
    a.req(107, label="whoAmI")


@case()
def auth_with_normal_xid(t, p):
    a = t.conn("A")
    a.auth("digest", b"alice:secret", xid=7)
    a.req(107, label="whoAmI")


@case()
def auth_grants_access(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.auth("digest", b"alice:secret")
    a.create(p, b"secret", acl=[(31, "digest", digest_id("alice", "secret"))])
    a.get(p)
    b.get(p)
    b.auth("digest", b"alice:wrong")
    b.get(p)
    b.auth("digest", b"alice:secret")
    b.get(p)


@case()
def sasl(t, p):
    a = t.conn("A")
    a.req(102, jbuf(b"token"), label="token=b'token'")


@case()
def sasl_empty_token(t, p):
    a = t.conn("A")
    a.req(102, jbuf(b""), label="token=b''")


# --- reconfig (16)

@case()
def reconfig_disabled(t, p):
    a = t.conn("A")
    a.req(16, jstr(None) + jstr(None) + jstr(None) + jlong(-1), label="incremental, nothing, curConfigId=-1")
    a.req(16, jstr("server.9=127.0.0.1:1:2") + jstr(None) + jstr(None) + jlong(-1), label="join server.9")


# --- setWatches (101), setWatches2 (105)

@case()
def set_watches(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/data", b"0")
    a.create(p + "/gone")
    a.create(p + "/kids")
    a.create(p + "/still")
    a.get(p)  # last zxid seen so far
    rel = max(t.zxids)
    a.set(p + "/data", b"1")
    a.delete(p + "/gone")
    a.create(p + "/kids/k")
    a.create(p + "/born")
    b = t.conn("B")
    b.req(101, jlong(rel) + jvec([p + "/data", p + "/gone", p + "/still", p + "/never"])
          + jvec([p + "/born", p + "/unborn"]) + jvec([p + "/kids", p + "/gone", p + "/still"]),
          xid=-8, label="relativeZxid=LAST data=[data,gone,still,never] exist=[born,unborn] child=[kids,gone,still]")
    a.set(p + "/still", b"x")
    a.create(p + "/unborn")
    a.create(p + "/never")
    a.create(p + "/still/c")
    b.probe()


@case()
def set_watches_relative_zxid_zero(t, p):
    a = t.conn("A")
    a.create(p)
    b = t.conn("B")
    b.req(101, jlong(0) + jvec([p]) + jvec([]) + jvec([p]), xid=-8, label="relativeZxid=0 data=[p] child=[p]")
    b.req(101, jlong(0) + jvec(None) + jvec(None) + jvec(None), xid=-8, label="null vectors")


@case()
def set_watches_normal_xid(t, p):
    a = t.conn("A")
    a.create(p)
    a.req(101, jlong(1 << 62) + jvec([p]) + jvec([]) + jvec([]), label="xid=1 relativeZxid=2^62 data=[p]")
    a.set(p, b"x")
    a.probe()


@case()
def set_watches2(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/d", b"0")
    a.get(p)
    rel = max(t.zxids)
    a.set(p + "/d", b"1")
    b = t.conn("B")
    b.req(105, jlong(rel) + jvec([p + "/d"]) + jvec([]) + jvec([]) + jvec([p + "/pers"]) + jvec([p + "/rec"]),
          xid=-8, label="relativeZxid=LAST data=[d] persistent=[pers] recursive=[rec]")
    b.check_watches(p + "/pers", 3)
    b.check_watches(p + "/rec", 3)
    a.create(p + "/pers")
    a.create(p + "/rec")
    a.create(p + "/rec/x")
    a.create(p + "/pers/y")
    a.set(p + "/pers", b"p")
    b.probe()


# --- checkWatches (17), removeWatches (18), addWatch (106)

@case()
def check_watches(t, p):
    a = t.conn("A")
    a.create(p)
    for ty in (1, 2, 3):
        a.check_watches(p, ty)
    a.get(p, watch=True)
    for ty in (1, 2, 3):
        a.check_watches(p, ty)
    a.children(p, watch=True)
    a.check_watches(p, 1)
    a.exists(p + "/none", watch=True)
    a.check_watches(p + "/none", 2)
    a.check_watches(p + "/none", 1)


for _ty in (0, 4, -1):
    def _bad_type(t, p, ty=_ty):
        a = t.conn("A")
        a.create(p)
        a.get(p, watch=True)
        a.check_watches(p, ty)
    add("check_watches_bad_type_%s" % str(_ty).replace("-", "minus"), _bad_type)

    def _remove_bad_type(t, p, ty=_ty):
        a = t.conn("A")
        a.create(p)
        a.get(p, watch=True)
        a.remove_watches(p, ty)
    add("remove_watches_bad_type_%s" % str(_ty).replace("-", "minus"), _remove_bad_type)


@case()
def remove_watches(t, p):
    a = t.conn("A")
    a.create(p)
    a.remove_watches(p, 3)
    a.get(p, watch=True)
    a.children(p, watch=True)
    a.remove_watches(p, 1)
    a.check_watches(p, 1)
    a.check_watches(p, 2)
    a.remove_watches(p, 1)
    a.remove_watches(p, 2)
    a.check_watches(p, 3)
    a.get(p, watch=True)
    a.children(p, watch=True)
    a.remove_watches(p, 3)
    a.check_watches(p, 3)
    a.set(p, b"x")
    a.create(p + "/c")


for _mode in (0, 1):
    for _ty in (1, 2, 3):
        def _remove_persistent(t, p, mode=_mode, ty=_ty):
            a = t.conn("A")
            a.create(p)
            a.add_watch(p, mode)
            a.check_watches(p, 1)
            a.check_watches(p, 2)
            a.check_watches(p, 3)
            a.remove_watches(p, ty)
            a.check_watches(p, 1)
            a.check_watches(p, 2)
            a.check_watches(p, 3)
            a.remove_watches(p, ty)
            a.set(p, b"x")
            a.create(p + "/c")
            a.remove_watches(p, 3)
        add("remove_watches_%s_type_%d" % ("persistent" if _mode == 0 else "recursive", _ty), _remove_persistent)


@case()
def add_watch_persistent(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    a.add_watch(p + "/w", 0)
    b.create(p + "/w")
    b.set(p + "/w", b"1")
    b.create(p + "/w/c")
    b.set(p + "/w/c", b"2")
    b.delete(p + "/w/c")
    b.delete(p + "/w")
    a.probe()
    a.create(p + "/w")
    a.set(p + "/w", b"own")


@case()
def add_watch_recursive(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    a.add_watch(p + "/w", 1)
    b.create(p + "/w")
    b.set(p + "/w", b"1")
    b.create(p + "/w/c")
    b.create(p + "/w/c/d")
    b.set(p + "/w/c/d", b"2")
    b.delete(p + "/w/c/d")
    b.delete(p + "/w/c")
    b.create(p + "/wx")
    a.probe()


@case()
def add_watch_plus_one_shot(t, p):
    a = t.conn("A")
    a.create(p)
    a.add_watch(p, 0)
    a.get(p, watch=True)
    a.children(p, watch=True)
    a.set(p, b"1")
    a.create(p + "/c")
    a.set(p, b"2")


for _mode in (2, -1):
    def _add_bad_mode(t, p, mode=_mode):
        a = t.conn("A")
        a.create(p)
        a.add_watch(p, mode)
        a.set(p, b"x")
    add("add_watch_bad_mode_%s" % str(_mode).replace("-", "minus"), _add_bad_mode)


# --- getEphemerals (103), getAllChildrenNumber (104)

@case()
def get_ephemerals(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    a.create(p + "/e1", flags=1)
    a.create(p + "/e2", flags=1)
    a.create(p + "x", flags=1)
    b.create(p + "/other", flags=1)
    for prefix in (p, p + "/", p + "/e1", "/nomatch", p[:-2]):
        a.req(103, jstr(prefix), label="prefix=%r" % prefix)
    b.req(103, jstr(p), label="prefix=%r" % p)


@case()
def get_ephemerals_all(t, p):
    a = t.conn("A")
    a.create(p, flags=1)
    for prefix in (None, "", "/", " "):
        a.req(103, jstr(prefix), label="prefix=%r" % (prefix,))
    t.conn("B").req(103, jstr("/"), label="prefix='/' (no ephemerals)")


@case()
def get_all_children_number(t, p):
    a = t.conn("A")
    a.create(p)
    a.create(p + "/a")
    a.create(p + "/a/b")
    a.create(p + "/c")
    a.create(p + "x")
    for path in (p, p + "/a", p + "/c", p + "/none", "/zookeeper", "noslash"):
        a.req(104, jstr(path), label="path=%r" % path)


@case()
def get_all_children_number_empty_path(t, p):
    # The count is every node of the tree, which depends on the cases before: only its presence counts.
    t.conn("A").req(104, jstr(""), label="path=''", mask=True)


# --- closeSession (-11)

@case()
def close_session(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    a.create(p + "/e", flags=1)
    b.exists(p + "/e", watch=True)
    b.children(p, watch=True)
    a.close_session()
    b.probe()
    b.exists(p + "/e")


@case()
def close_session_with_body(t, p):
    a = t.conn("A")
    a.req(-11, b"junk", label="closeSession with a body")


# --- unknown and invalid opcodes

for _op in (999, 10, 0, 23, 108, 20, -1, -12):
    def _unknown(t, p, op=_op):
        a = t.conn("A")
        a.create(p)
        a.req(op, jstr(p) + jint(-1), label="(path, -1)")
        b = t.conn("B")
        b.exists(p)
    add("opcode_%s" % str(_op).replace("-", "minus"), _unknown)


@case()
def delete_container_from_client(t, p):
    a = t.conn("A")
    a.create(p)
    a.req(19, create_req(p + "/c", flags=4), label="createContainer")
    a.req(20, (p + "/c").encode(), label="deleteContainer, raw path bytes")
    b = t.conn("B")
    b.exists(p + "/c")


# --- undecodable bodies

@case()
def truncated_body(t, p):
    a = t.conn("A")
    a.create(p)
    a.req(4, jint(100) + b"/raw", label="getData with a string length past the end")


@case()
def get_data_missing_watch_byte(t, p):
    a = t.conn("A")
    a.create(p)
    a.req(4, jstr(p), label="getData without the watch byte")


# --- READ permission on exists and on watch events (these changed within 3.8: 3.8.0, the reference
# here, answers exists and delivers the event; 3.8.6 answers NOAUTH and filters the event)

@case()
def exists_without_read_permission(t, p):
    a = t.conn("A")
    a.create(p, acl=[(2, "world", "anyone")])
    a.exists(p)
    a.get(p)


@case()
def watch_event_without_read_permission(t, p):
    a = t.conn("A")
    b = t.conn("B")
    a.create(p)
    b.exists(p + "/c", watch=True)
    b.children(p, watch=True)
    a.create(p + "/c", acl=[(2 | 8 | 16, "world", "anyone")])
    b.probe()
