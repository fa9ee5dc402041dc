"""Java ZooKeeper clients against the cluster: Curator 5.9 recipes and the ZooKeeper 3.9 Java client.

The Maven project in tests/zk/java is built once per session (mvn package, dependencies copied to
target/lib); each test runs one scenario of synod.zkcompat.Scenarios in its own JVM against the
`cluster` fixture. Scenarios that synod does not pass yet are marked xfail(strict) with the exact
difference, so they fail loudly once it is fixed.
"""

import os
import shutil
import subprocess

import pytest

from conftest import TARGET

HERE = os.path.dirname(os.path.abspath(__file__))
JAVA_DIR = os.path.join(HERE, "java")
MAIN = "synod.zkcompat.Scenarios"

JAAS_CLIENT = """Client {
  org.apache.zookeeper.server.auth.DigestLoginModule required
  username="kafka"
  password="kafka-secret";
};
"""

JAAS_KAFKA_ONLY = """KafkaServer {
  org.apache.kafka.common.security.plain.PlainLoginModule required
  username="admin"
  password="admin-secret";
};
"""


def synod_xfail(reason):
    return pytest.mark.xfail(TARGET == "synod", reason=reason, strict=True)


@pytest.fixture(scope="session")
def java_classpath():
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if not mvn or not java:
        msg = "Maven and a JDK (17+) are needed for the Java client tests (apt-get install maven default-jdk-headless)"
        if os.environ.get("ZK_JAVA_REQUIRED"):
            pytest.fail(msg)  # CI: do not let the Java clients go untested silently
        pytest.skip(msg)
    r = subprocess.run(
        [mvn, "-q", "-B", "package", "-DskipTests"], cwd=JAVA_DIR, capture_output=True, text=True, timeout=900
    )
    if r.returncode != 0:
        pytest.fail("mvn package failed in %s:\n%s\n%s" % (JAVA_DIR, r.stdout[-5000:], r.stderr[-5000:]))
    target = os.path.join(JAVA_DIR, "target")
    return os.pathsep.join([os.path.join(target, "classes"), os.path.join(target, "lib", "*")])


def run_scenario(cp, cluster, scenario, jvm_args=()):
    cmd = [
        "java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        *jvm_args, "-cp", cp, MAIN, scenario, cluster.hosts(),
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%s: the JVM did not finish within 90 s\n%s" % (scenario, e.stdout or ""))
    if r.returncode != 0:
        pytest.fail(
            "%s exited %d:\n--- stdout\n%s\n--- stderr (client log)\n%s"
            % (scenario, r.returncode, r.stdout[-6000:], r.stderr[-6000:])
        )
    assert ("OK " + scenario) in r.stdout, r.stdout


CURATOR = [
    "leader-latch",
    "leader-selector",
    "mutex",
    "semaphore",
    "barrier",
    "path-children-cache",
    "curator-cache",
    "shared-count",
    "distributed-queue",
]

CLIENT = [
    "zk-create-modes",
    "zk-data-and-watches",
    "zk-multi",
    # Checks among others that getACL returns a node's ACL list in the order it was set, as
    # ZooKeeper does (synod's fix_acl sorted it up to commit 7c2431e).
    "zk-acl-digest",
    # ZooKeeper removes duplicates from the list as given, then expands `auth`.
    "zk-acl-auth-expansion",
    "zk-ephemerals-and-counts",
    "zk-persistent-watches",
    "zk-sync-and-whoami",
    "zk-async-pipeline",
    "zk-session-moves",
]


@pytest.mark.parametrize("scenario", CURATOR)
def test_curator(java_classpath, cluster, scenario):
    run_scenario(java_classpath, cluster, scenario)


@pytest.mark.parametrize("scenario", CLIENT)
def test_zookeeper_java_client(java_classpath, cluster, scenario):
    run_scenario(java_classpath, cluster, scenario)


def test_jaas_client_section_without_server_sasl(java_classpath, cluster, tmp_path):
    # A JAAS file with a "Client" section makes the ZooKeeper client start a SASL (DIGEST-MD5)
    # exchange, op 102 with an empty token, right after connecting. A server without SASL answers
    # it OK with a null token (ZooKeeper: err 0, body ffffffff); the client's DIGEST-MD5 fails on
    # that and it goes AUTH_FAILED at once (AuthFailed event, AUTHFAILED for its requests).
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS_CLIENT)
    run_scenario(
        java_classpath, cluster, "zk-jaas-client-section",
        jvm_args=["-Djava.security.auth.login.config=%s" % jaas],
    )


def test_jaas_file_without_client_section(java_classpath, cluster, tmp_path):
    # Kafka's usual broker JAAS file (KafkaServer only): the ZooKeeper client does not try SASL
    # and works as usual.
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS_KAFKA_ONLY)
    run_scenario(
        java_classpath, cluster, "zk-jaas-without-client-section",
        jvm_args=["-Djava.security.auth.login.config=%s" % jaas],
    )
