"""TLS on the ZooKeeper client port (ZooKeeper's secureClientPort): kazoo over TLS, SASL over
TLS, x509 ACL ids from client certificates (ZooKeeper's X509AuthenticationProvider: the
certificate's subject DN, `CN=alice,O=synod`), and ssl.clientAuth = need refusing a client
without a certificate. Runs against both targets: Debian's ZooKeeper serves its secure port
with Netty, reading `synod certs` PEM files (ssl.keyStore.type=PEM)."""

import glob
import os
import socket
import ssl
import struct
import subprocess

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

from conftest import SYNOD, TARGET, SingleServer

try:
    import puresasl  # noqa: F401  (kazoo's SASL needs it)
except ImportError:
    pytest.fail("pure-sasl is not installed: pip install -r tests/requirements.txt", pytrace=False)

JAAS = """Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_bob="bobsecret";
};
"""


@pytest.fixture(scope="module")
def server():
    s = SingleServer(
        20,
        synod_toml=(
            'secure_client_addr = "127.0.0.1:{{secure}}"\n'
            '[zookeeper]\njaas_file = "{jaas}"\n'
            '[tls]\nca_file = "{{certs}}/ca.crt"\ncert_file = "{{certs}}/node-1.crt"\n'
            'key_file = "{{certs}}/node-1.key"\nclient_auth = "need"\n'
        ),
        zk_cfg="secureClientPort={{secure}}\n",
        zk_jvm=[
            "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            "-Dzookeeper.ssl.keyStore.location={{certs}}/node.pem",
            "-Dzookeeper.ssl.keyStore.type=PEM",
            "-Dzookeeper.ssl.trustStore.location={{certs}}/ca.crt",
            "-Dzookeeper.ssl.trustStore.type=PEM",
            "-Dzookeeper.ssl.clientAuth=need",
            # Client certificates name users, not hosts.
            "-Dzookeeper.ssl.hostnameVerification=false",
            "-Dzookeeper.authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
            "-Djava.security.auth.login.config={jaas}",
            "-Dzookeeper.authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
        ],
        # Netty (the secure port) and a logger, from Debian's packages.
        zk_classpath=sorted(glob.glob("/usr/share/java/netty-*[a-z].jar")) + ["/usr/share/java/slf4j-simple.jar"],
        files={"jaas": JAAS},
    )
    s.secure = s.base + 3
    s.certs = os.path.join(s.dir, "certs")

    def fill(text):
        return text.replace("{secure}", str(s.secure)).replace("{certs}", s.certs)

    s.synod_toml = fill(s.synod_toml)
    s.zk_cfg = fill(s.zk_cfg)
    s.zk_jvm = [fill(a) for a in s.zk_jvm]
    subprocess.run([SYNOD, "certs", "dev", "--dir", s.certs, "--cluster-id", "zk-single", "--nodes", "1"],
                   check=True, capture_output=True)
    for name in ("alice", "mallory"):
        subprocess.run([SYNOD, "certs", "client", "--dir", s.certs, "--name", name], check=True, capture_output=True)
    with open(os.path.join(s.certs, "node.pem"), "w") as f:
        for part in ("node-1.crt", "node-1.key"):
            with open(os.path.join(s.certs, part)) as p:
                f.write(p.read())
    try:
        yield s.start()
    finally:
        s.stop()


def tls_client(server, name, **kw):
    return KazooClient(
        hosts="127.0.0.1:%d" % server.secure,
        timeout=10,
        use_ssl=True,
        verify_certs=True,
        ca=os.path.join(server.certs, "ca.crt"),
        certfile=os.path.join(server.certs, "client-%s.crt" % name),
        keyfile=os.path.join(server.certs, "client-%s.key" % name),
        **kw,
    )


def test_kazoo_over_tls(server):
    c = tls_client(server, "root")
    c.start(timeout=15)
    try:
        c.create("/tls", b"over tls")
        assert c.get("/tls")[0] == b"over tls"
    finally:
        c.stop()
        c.close()


def test_sasl_over_tls(server):
    c = tls_client(server, "root", sasl_options={"mechanism": "DIGEST-MD5", "username": "bob", "password": "bobsecret"})
    c.start(timeout=15)
    try:
        c.create("/tls-sasl", b"bob's", acl=[ACL(Permissions.ALL, Id("sasl", "bob"))])
        assert c.get("/tls-sasl")[0] == b"bob's"
    finally:
        c.stop()
        c.close()


def test_an_x509_acl_admits_its_certificate_only(server):
    alice = tls_client(server, "alice")
    mallory = tls_client(server, "mallory")
    alice.start(timeout=15)
    mallory.start(timeout=15)
    try:
        acl = [ACL(Permissions.ALL, Id("x509", "CN=alice,O=synod"))]
        alice.create("/tls-alice", b"alice's", acl=acl)
        assert alice.get("/tls-alice")[0] == b"alice's"
        assert alice.get_acls("/tls-alice")[0] == acl
        with pytest.raises(NoAuthError):
            mallory.get("/tls-alice")
        # The "auth" scheme expands to the connection's certificate identity.
        mallory.create("/tls-mallory", b"", acl=[ACL(Permissions.ALL, Id("auth", ""))])
        assert mallory.get_acls("/tls-mallory")[0] == [ACL(Permissions.ALL, Id("x509", "CN=mallory,O=synod"))]
        with pytest.raises(NoAuthError):
            alice.get("/tls-mallory")
    finally:
        for c in (alice, mallory):
            c.stop()
            c.close()


def raw_connect(server, cert=None):
    """A ConnectRequest over TLS (with client certificate `cert`, or none): the server's first
    4 bytes, or None if it refused."""
    ctx = ssl.create_default_context(cafile=os.path.join(server.certs, "ca.crt"))
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(os.path.join(server.certs, "client-%s.crt" % cert),
                            os.path.join(server.certs, "client-%s.key" % cert))
    raw = socket.create_connection(("127.0.0.1", server.secure), timeout=5)
    try:
        with ctx.wrap_socket(raw) as s:
            req = struct.pack("!iqiq", 0, 0, 10000, 0) + struct.pack("!i", 16) + b"\0" * 16 + b"\0"
            s.sendall(struct.pack("!i", len(req)) + req)
            return s.recv(4) or None
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return None
    finally:
        raw.close()


def test_a_client_without_a_certificate_is_refused_when_one_is_needed(server):
    assert raw_connect(server, cert="root") is not None
    assert raw_connect(server) is None
    if TARGET != "zookeeper":
        assert "TLS handshake with a client failed" in server.log()


def test_the_plain_port_still_serves(server):
    c = KazooClient(hosts=server.hosts(), timeout=10)
    c.start(timeout=15)
    try:
        assert c.exists("/tls") is not None
    finally:
        c.stop()
        c.close()
