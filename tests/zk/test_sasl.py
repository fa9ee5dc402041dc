"""SASL DIGEST-MD5 on the client port, as Apache ZooKeeper 3.8 serves it with a JAAS Server
section of DigestLoginModule users (and SASLAuthenticationProvider for `sasl` ACLs): kazoo
through pure-sasl, and a raw client for the replies byte by byte. The same tests run against
both targets."""

import hashlib
import os
import re
import subprocess
import struct
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Id, Permissions

from conftest import TARGET, ZKCLI, RawZK, SingleServer, jbuf, jstr

try:
    import puresasl  # noqa: F401  (kazoo's SASL needs it)
except ImportError:
    pytest.fail("pure-sasl is not installed: pip install -r tests/requirements.txt", pytrace=False)

JAAS = """// users of the test server
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_bob="bobsecret"
    user_alice="alicesecret"
    user_admin="adminsecret";
};
"""
SASL = 102
AUTHFAILED = -115


@pytest.fixture(scope="module")
def server():
    s = SingleServer(
        0,
        synod_toml='[zookeeper]\njaas_file = "{jaas}"\nsasl_super_user = "admin"\n',
        zk_jvm=[
            "-Djava.security.auth.login.config={jaas}",
            "-Dzookeeper.authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            "-Dzookeeper.superUser=admin",
        ],
        files={"jaas": JAAS},
    )
    try:
        yield s.start()
    finally:
        s.stop()


def sasl_client(server, user, password):
    return KazooClient(
        hosts=server.hosts(),
        timeout=10,
        connection_retry={"max_tries": 0},
        sasl_options={"mechanism": "DIGEST-MD5", "username": user, "password": password},
    )


def test_the_right_password_authenticates_and_a_sasl_acl_admits_the_user(server):
    bob = sasl_client(server, "bob", "bobsecret")
    bob.start(timeout=15)
    try:
        acl = [ACL(Permissions.ALL, Id("sasl", "bob"))]
        bob.create("/sasl-bob", b"for bob", acl=acl)
        assert bob.get("/sasl-bob")[0] == b"for bob"
        assert bob.get_acls("/sasl-bob")[0] == acl
    finally:
        bob.stop()
        bob.close()


def test_a_sasl_acl_refuses_other_sessions(server):
    bob = sasl_client(server, "bob", "bobsecret")
    bob.start(timeout=15)
    bob.ensure_path("/sasl-only-bob")
    bob.set_acls("/sasl-only-bob", [ACL(Permissions.ALL, Id("sasl", "bob"))])
    bob.stop()
    bob.close()
    alice = sasl_client(server, "alice", "alicesecret")
    alice.start(timeout=15)
    anonymous = KazooClient(hosts=server.hosts(), timeout=10)
    anonymous.start(timeout=15)
    try:
        with pytest.raises(NoAuthError):
            alice.get("/sasl-only-bob")
        with pytest.raises(NoAuthError):
            anonymous.get("/sasl-only-bob")
        # A digest identity of the same name is another identity.
        anonymous.add_auth("digest", "bob:bobsecret")
        with pytest.raises(NoAuthError):
            anonymous.get("/sasl-only-bob")
    finally:
        for c in (alice, anonymous):
            c.stop()
            c.close()


def test_the_sasl_super_user_reads_everything(server):
    bob = sasl_client(server, "bob", "bobsecret")
    bob.start(timeout=15)
    bob.ensure_path("/sasl-bob-private")
    bob.set_acls("/sasl-bob-private", [ACL(Permissions.ALL, Id("sasl", "bob"))])
    bob.set("/sasl-bob-private", b"secret")
    bob.stop()
    bob.close()
    admin = sasl_client(server, "admin", "adminsecret")
    alice = sasl_client(server, "alice", "alicesecret")
    admin.start(timeout=15)
    alice.start(timeout=15)
    try:
        assert admin.get("/sasl-bob-private")[0] == b"secret"
        with pytest.raises(NoAuthError):
            alice.get("/sasl-bob-private")
    finally:
        for c in (admin, alice):
            c.stop()
            c.close()


def assert_auth_fails(c, caplog):
    """kazoo reports CONNECTED before its SASL exchange; a failed one then logs AUTH_FAILED and
    closes the client (start() may return first, or time out)."""
    caplog.clear()
    try:
        c.start(timeout=8)
    except (AuthFailedError, KazooTimeoutError):
        pass
    deadline = time.time() + 10
    while "AUTH_FAILED" not in caplog.text and time.time() < deadline:
        time.sleep(0.05)
    assert "AUTH_FAILED" in caplog.text
    assert not c.connected
    c.stop()
    c.close()


def test_a_wrong_password_fails(server, caplog):
    assert_auth_fails(sasl_client(server, "bob", "not-his-password"), caplog)
    assert_auth_fails(sasl_client(server, "nobody", "x"), caplog)


def digest_response(challenge, user, password, cnonce="4219837182"):
    """The client's DIGEST-MD5 response to a challenge (RFC 2831, qop=auth)."""
    fields = dict(re.findall(r'([a-z-]+)="?([^",]*)"?', challenge))
    realm, nonce, uri = fields["realm"], fields["nonce"], "zookeeper/zk-sasl-md5"
    md5 = lambda b: hashlib.md5(b).digest()  # noqa: E731
    hexmd5 = lambda b: hashlib.md5(b).hexdigest()  # noqa: E731
    a1 = md5(("%s:%s:%s" % (user, realm, password)).encode()) + (":%s:%s" % (nonce, cnonce)).encode()
    kd = lambda a2: hexmd5(("%s:%s:00000001:%s:auth:%s" % (hexmd5(a1), nonce, cnonce, hexmd5(a2))).encode())  # noqa: E731
    response = kd(("AUTHENTICATE:" + uri).encode())
    token = ('charset=utf-8,username="%s",realm="%s",nonce="%s",nc=00000001,cnonce="%s",'
             'digest-uri="%s",maxbuf=65536,response=%s,qop=auth' % (user, realm, nonce, cnonce, uri, response))
    return token.encode(), "rspauth=" + kd((":" + uri).encode())


def closed(raw):
    """Has the server closed the connection?"""
    raw.s.settimeout(5)
    try:
        return raw.s.recv(1) == b""
    except ConnectionError:
        return True


def test_the_exchange_byte_by_byte(server):
    raw = RawZK(server.port)
    err, body = raw.call(SASL, jbuf(b""))
    assert err == 0
    (n,) = struct.unpack_from("!i", body, 0)
    challenge = body[4:4 + n].decode()
    # As ZooKeeper words it: no qop (auth, the default), a 40-character nonce.
    assert re.fullmatch(r'realm="zk-sasl-md5",nonce="[A-Za-z0-9+/]{40}",charset=utf-8,algorithm=md5-sess',
                        challenge), challenge
    token, rspauth = digest_response(challenge, "bob", "bobsecret")
    err, body = raw.call(SASL, jbuf(token))
    assert err == 0
    (n,) = struct.unpack_from("!i", body, 0)
    assert body[4:4 + n].decode() == rspauth
    # Authenticated: a node only sasl:bob may read is readable on this connection.
    acl = struct.pack("!i", 1) + struct.pack("!i", 31) + jstr("sasl") + jstr("bob")
    err, _ = raw.call(1, jstr("/sasl-raw") + jbuf(b"x") + acl + struct.pack("!i", 0))
    assert err in (0, -110)
    err, _ = raw.call(4, jstr("/sasl-raw") + b"\0")
    assert err == 0
    raw.close()


def test_a_failed_exchange_is_answered_authfailed_and_closes_the_connection(server):
    raw = RawZK(server.port)
    err, body = raw.call(SASL, jbuf(b""))
    assert err == 0
    challenge = body[4:].decode()
    token, _ = digest_response(challenge, "bob", "wrong")
    err, body = raw.call(SASL, jbuf(token))
    assert err == AUTHFAILED
    # ZooKeeper sends its SetSASLResponse with a null token even so.
    assert body == struct.pack("!i", -1)
    assert closed(raw)


@pytest.mark.parametrize("first", [b"username=\"bob\"", b"\x00" * 100])
def test_an_initial_response_is_ignored(server, first):
    """DIGEST-MD5 has no initial response: ZooKeeper ignores one and sends its challenge; an
    empty token next is then a malformed response and fails."""
    raw = RawZK(server.port)
    err, body = raw.call(SASL, jbuf(first))
    assert err == 0
    assert b'realm="zk-sasl-md5"' in body
    err, body = raw.call(SASL, jbuf(b""))
    assert err == AUTHFAILED
    assert body == struct.pack("!i", -1)
    assert closed(raw)


def test_nothing_after_a_completed_exchange(server):
    raw = RawZK(server.port)
    err, body = raw.call(SASL, jbuf(b""))
    token, _ = digest_response(body[4:].decode(), "bob", "bobsecret")
    err, _ = raw.call(SASL, jbuf(token))
    assert err == 0
    err, _ = raw.call(SASL, jbuf(b""))
    assert err == AUTHFAILED
    assert closed(raw)


def test_garbage_after_the_challenge_fails(server):
    for junk in [b"\xff" * 64, b"nonce=", b'username="bob",nonce="x"', b"a" * 5000]:
        raw = RawZK(server.port)
        err, _ = raw.call(SASL, jbuf(b""))
        assert err == 0
        err, _ = raw.call(SASL, jbuf(junk))
        assert err == AUTHFAILED, junk[:20]
        assert closed(raw)


@pytest.fixture(scope="module")
def strict_server():
    """A server that requires SASL (ZooKeeper's enforce.auth.enabled + schemes=sasl)."""
    s = SingleServer(
        5,
        synod_toml='[zookeeper]\njaas_file = "{jaas}"\nrequire_auth = ["sasl"]\n',
        zk_jvm=[
            "-Djava.security.auth.login.config={jaas}",
            "-Dzookeeper.authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            "-Dzookeeper.enforce.auth.enabled=true",
            "-Dzookeeper.enforce.auth.schemes=sasl",
        ],
        files={"jaas": JAAS},
    )
    try:
        yield s.start()
    finally:
        s.stop()


SESSIONCLOSEDREQUIRESASLAUTH = -124


def test_required_sasl_refuses_unauthenticated_requests(strict_server):
    raw = RawZK(strict_server.port)
    err, body = raw.call(4, jstr("/") + b"\0")
    assert err == SESSIONCLOSEDREQUIRESASLAUTH
    assert closed(raw)
    # A digest identity is not the scheme required.
    raw = RawZK(strict_server.port)
    err, _ = raw.call(100, struct.pack("!i", 0) + jstr("digest") + jbuf(b"bob:bobsecret"), xid=-4)
    assert err == 0
    err, _ = raw.call(4, jstr("/") + b"\0")
    assert err == SESSIONCLOSEDREQUIRESASLAUTH
    assert closed(raw)


def test_required_sasl_admits_an_authenticated_client(strict_server):
    bob = sasl_client(strict_server, "bob", "bobsecret")
    bob.start(timeout=15)
    try:
        assert bob.exists("/") is not None
    finally:
        bob.stop()
        bob.close()


def test_a_failed_exchange_under_required_sasl_says_so(strict_server):
    raw = RawZK(strict_server.port)
    err, body = raw.call(SASL, jbuf(b""))
    token, _ = digest_response(body[4:].decode(), "bob", "wrong")
    err, body = raw.call(SASL, jbuf(token))
    assert err == SESSIONCLOSEDREQUIRESASLAUTH
    assert body == struct.pack("!i", -1)
    assert closed(raw)


CLIENT_JAAS = """Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="%s"
    password="%s";
};
"""


@pytest.mark.parametrize("password,ok", [("bobsecret", True), ("wrong", False)])
def test_the_java_client_with_a_jaas_client_section(server, password, ok, tmp_path):
    """ZooKeeper's own Java client (Debian's zkCli.sh), configured as ZooKeeper documents it."""
    if not os.path.exists(ZKCLI):
        pytest.skip("zkCli.sh is not installed (apt-get install zookeeper)")
    jaas = tmp_path / "client.jaas"
    jaas.write_text(CLIENT_JAAS % ("bob", password))
    env = dict(os.environ, CLIENT_JVMFLAGS="-Djava.security.auth.login.config=%s" % jaas)
    out = subprocess.run([ZKCLI, "-server", server.hosts(), "whoami"], capture_output=True, text=True,
                         timeout=60, env=env)
    text = out.stdout + out.stderr
    if ok:
        assert "state:SaslAuthenticated" in text and "sasl: bob" in text, text[-2000:]
    else:
        assert "sasl: bob" not in text, text[-2000:]
        assert "state:AuthFailed" in text, text[-2000:]
