package synod.zkcompat;

import static synod.zkcompat.Scenarios.b;
import static synod.zkcompat.Scenarios.check;
import static synod.zkcompat.Scenarios.s;
import static synod.zkcompat.Scenarios.split;
import static synod.zkcompat.Scenarios.uniq;
import static synod.zkcompat.Scenarios.waitFor;
import static synod.zkcompat.Scenarios.zk;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Op;
import org.apache.zookeeper.OpResult;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.Watcher.Event.EventType;
import org.apache.zookeeper.Watcher.Event.KeeperState;
import org.apache.zookeeper.ZooDefs.Ids;
import org.apache.zookeeper.ZooDefs.Perms;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.ClientInfo;
import org.apache.zookeeper.data.Id;
import org.apache.zookeeper.data.Stat;
import org.apache.zookeeper.server.auth.DigestAuthenticationProvider;

import synod.zkcompat.Scenarios.Events;

/** The plain ZooKeeper Java client (org.apache.zookeeper.ZooKeeper, 3.9). */
final class ClientScenarios {
    private ClientScenarios() {}

    static final List<ACL> OPEN = Ids.OPEN_ACL_UNSAFE;

    interface Call {
        void run() throws Exception;
    }

    /** The call fails with exactly this KeeperException code. */
    static KeeperException expectError(KeeperException.Code code, String what, Call call) throws Exception {
        try {
            call.run();
        } catch (KeeperException e) {
            check(e.code() == code, "%s: expected %s, got %s", what, code, e);
            return e;
        }
        throw new AssertionError(what + ": expected " + code + ", but it succeeded");
    }

    static int seq(String path) {
        return Integer.parseInt(path.substring(path.length() - 10));
    }

    /** create in every mode: persistent, sequential, ephemeral, container, TTL. */
    static void createModes(String hosts) throws Exception {
        ZooKeeper zk = zk(hosts);
        ZooKeeper other = zk(hosts);
        try {
            String base = zk.create(uniq("/java-create"), new byte[0], OPEN, CreateMode.PERSISTENT);
            check(zk.create(base + "/p", b("d"), OPEN, CreateMode.PERSISTENT).equals(base + "/p"), "persistent path");

            String s1 = zk.create(base + "/s-", b(""), OPEN, CreateMode.PERSISTENT_SEQUENTIAL);
            String s2 = zk.create(base + "/s-", b(""), OPEN, CreateMode.PERSISTENT_SEQUENTIAL);
            check(s1.matches(Pattern.quote(base) + "/s-\\d{10}"), "sequential name %s", s1);
            check(seq(s2) == seq(s1) + 1, "sequence numbers %s then %s", s1, s2);

            Stat st = new Stat();
            zk.create(base + "/e", b("eph"), OPEN, CreateMode.EPHEMERAL, st);
            check(st.getEphemeralOwner() == zk.getSessionId(), "ephemeralOwner %x, session %x",
                    st.getEphemeralOwner(), zk.getSessionId());
            check(st.getVersion() == 0 && st.getDataLength() == 3 && st.getCzxid() == st.getMzxid() && st.getCzxid() > 0,
                    "create2 stat %s", st);
            String es = zk.create(base + "/es-", b(""), OPEN, CreateMode.EPHEMERAL_SEQUENTIAL);
            check(es.matches(Pattern.quote(base) + "/es-\\d{10}") && seq(es) == seq(s2) + 2,
                    "ephemeral sequential %s after %s and /e (the parent counts all its creations)", es, s2);
            check(zk.exists(es, false).getEphemeralOwner() == zk.getSessionId(), "ephemeral sequential owner");

            // Null data stays null (dataLength 0); empty data is empty.
            Stat nst = new Stat();
            zk.create(base + "/null", null, OPEN, CreateMode.PERSISTENT);
            check(zk.getData(base + "/null", false, nst) == null && nst.getDataLength() == 0, "null data read back as %s",
                    nst);
            zk.create(base + "/empty", new byte[0], OPEN, CreateMode.PERSISTENT);
            byte[] empty = zk.getData(base + "/empty", false, null);
            check(empty != null && empty.length == 0, "empty data read back as %s", Arrays.toString(empty));
            zk.setData(base + "/empty", null, -1);
            check(zk.getData(base + "/empty", false, null) == null, "setData(null) read back as non-null");

            expectError(KeeperException.Code.NODEEXISTS, "create existing", () ->
                    zk.create(base + "/p", b(""), OPEN, CreateMode.PERSISTENT));
            expectError(KeeperException.Code.NONODE, "create without parent", () ->
                    zk.create(base + "/missing/x", b(""), OPEN, CreateMode.PERSISTENT));
            expectError(KeeperException.Code.NOCHILDRENFOREPHEMERALS, "child of an ephemeral", () ->
                    zk.create(base + "/e/x", b(""), OPEN, CreateMode.PERSISTENT));

            // Another session's ephemeral goes when it closes.
            other.create(base + "/theirs", b(""), OPEN, CreateMode.EPHEMERAL);
            other.close();
            zk.sync(base);
            check(zk.exists(base + "/theirs", false) == null, "an ephemeral outlived its closed session");

            // Container: stays while it has a child, is reaped once emptied.
            Stat cst = new Stat();
            zk.create(base + "/box", b(""), OPEN, CreateMode.CONTAINER, cst);
            check(cst.getEphemeralOwner() == 0, "container ephemeralOwner %x", cst.getEphemeralOwner());
            zk.create(base + "/box/item", b(""), OPEN, CreateMode.PERSISTENT);
            zk.delete(base + "/box/item", -1);

            // TTL nodes (extended types enabled on the server).
            Stat tst = new Stat();
            zk.create(base + "/ttl", b("t"), OPEN, CreateMode.PERSISTENT_WITH_TTL, tst, 500);
            check(tst.getEphemeralOwner() == 0, "TTL node ephemeralOwner %x", tst.getEphemeralOwner());
            String ts = zk.create(base + "/ttls-", b(""), OPEN, CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL, null, 500);
            check(ts.matches(Pattern.quote(base) + "/ttls-\\d{10}"), "TTL sequential %s", ts);
            zk.create(base + "/ttl-kept", b(""), OPEN, CreateMode.PERSISTENT_WITH_TTL, null, 500);
            zk.create(base + "/ttl-kept/child", b(""), OPEN, CreateMode.PERSISTENT);

            check(waitFor(() -> zk.exists(base + "/box", false) == null, 30_000), "the emptied container stayed");
            check(waitFor(() -> zk.exists(base + "/ttl", false) == null, 30_000), "the expired TTL node stayed");
            check(waitFor(() -> zk.exists(ts, false) == null, 30_000), "the expired sequential TTL node stayed");
            check(zk.exists(base + "/ttl-kept", false) != null, "a TTL node with a child was reaped");
        } finally {
            zk.close();
            other.close();
        }
    }

    /** getData/setData/exists/getChildren with one-shot watches, between two sessions. */
    static void dataAndWatches(String hosts) throws Exception {
        String[] h = split(hosts);
        Events dflt = new Events("default");
        ZooKeeper zk = zk(h[0], dflt);
        ZooKeeper w = zk(h[1]);
        try {
            String base = zk.create(uniq("/java-watch"), new byte[0], OPEN, CreateMode.PERSISTENT);
            String n = zk.create(base + "/n", b("1"), OPEN, CreateMode.PERSISTENT);

            Events data = new Events("data");
            Stat st = new Stat();
            check("1".equals(s(zk.getData(n, data, st))) && st.getVersion() == 0, "getData %s", st);
            w.sync(n);
            Stat st2 = w.setData(n, b("2"), 0);
            check(st2.getVersion() == 1 && st2.getMzxid() > st.getMzxid(), "setData stat %s", st2);
            data.expect(EventType.NodeDataChanged, n);
            w.setData(n, b("3"), 1);
            data.expectNone(300); // one-shot
            expectError(KeeperException.Code.BADVERSION, "setData with a stale version", () -> w.setData(n, b("x"), 1));
            expectError(KeeperException.Code.NONODE, "setData of a missing node", () -> w.setData(base + "/none", b("x"), -1));

            Events exists = new Events("exists");
            check(zk.exists(base + "/m", exists) == null, "exists on a missing node");
            w.create(base + "/m", b(""), OPEN, CreateMode.PERSISTENT);
            exists.expect(EventType.NodeCreated, base + "/m");

            Events children = new Events("children");
            zk.sync(base);
            List<String> kids = new ArrayList<>(zk.getChildren(base, children));
            Collections.sort(kids);
            check(kids.equals(Arrays.asList("m", "n")), "children %s", kids);
            w.create(base + "/k", b(""), OPEN, CreateMode.PERSISTENT);
            children.expect(EventType.NodeChildrenChanged, base);

            // An exists watch on an existing node fires on a change; a child watch on a node
            // fires NodeDeleted when the node itself goes.
            Events existsOn = new Events("exists-existing");
            Events childOfK = new Events("child-of-k");
            zk.sync(base);
            check(zk.exists(base + "/m", existsOn) != null, "exists(m)");
            check(zk.getChildren(base + "/k", childOfK).isEmpty(), "children of k");
            w.setData(base + "/m", b("m"), -1);
            existsOn.expect(EventType.NodeDataChanged, base + "/m");
            w.delete(base + "/k", -1);
            childOfK.expect(EventType.NodeDeleted, base + "/k");
            w.create(base + "/k", b(""), OPEN, CreateMode.PERSISTENT);

            // getChildren2 and the stat it carries
            zk.sync(base);
            Stat pst = new Stat();
            check(zk.getChildren(base, false, pst).size() == 3 && pst.getNumChildren() == 3 && pst.getCversion() == 5,
                    "getChildren2 stat %s (cversion counts creations and deletions: 4 + 1)", pst);

            // Default watcher (watch=true), a data watch and an exists watch fire on delete; the
            // parent's child watch too.
            Events del = new Events("delete");
            Events children2 = new Events("children2");
            zk.sync(n);
            check("3".equals(s(zk.getData(n, true, null))), "getData after sync");
            zk.getData(n, del, null);
            zk.getChildren(base, children2);
            w.delete(n, 2);
            dflt.expect(EventType.NodeDeleted, n);
            del.expect(EventType.NodeDeleted, n);
            children2.expect(EventType.NodeChildrenChanged, base);
            expectError(KeeperException.Code.NOTEMPTY, "delete a parent", () -> w.delete(base, -1));

            // Large data (under jute.maxbuffer, 1 MiB - 1 by default) round-trips.
            byte[] big = new byte[1_000_000];
            for (int i = 0; i < big.length; i++) {
                big[i] = (byte) (i * 31);
            }
            w.create(base + "/big", big, OPEN, CreateMode.PERSISTENT);
            zk.sync(base + "/big");
            Stat bst = new Stat();
            check(Arrays.equals(zk.getData(base + "/big", false, bst), big) && bst.getDataLength() == big.length,
                    "1 MB of data did not round-trip (%s)", bst);
            expectError(KeeperException.Code.NONODE, "getData of a deleted node", () -> {
                zk.sync(n);
                zk.getData(n, false, null);
            });
        } finally {
            zk.close();
            w.close();
        }
    }

    static int errOf(OpResult r) {
        return r instanceof OpResult.ErrorResult ? ((OpResult.ErrorResult) r).getErr() : 0;
    }

    /** multi: all or nothing, with ZooKeeper's per-op results; multiRead. */
    static void multi(String hosts) throws Exception {
        ZooKeeper zk = zk(hosts);
        try {
            String base = zk.create(uniq("/java-multi"), new byte[0], OPEN, CreateMode.PERSISTENT);
            List<Op> failing = Arrays.asList(
                    Op.create(base + "/a", b("a"), OPEN, CreateMode.PERSISTENT),
                    Op.setData(base, b("x"), -1),
                    Op.check(base, 5),
                    Op.create(base + "/b", b("b"), OPEN, CreateMode.PERSISTENT));
            KeeperException e = expectError(KeeperException.Code.BADVERSION, "multi with a failing check",
                    () -> zk.multi(failing));
            List<OpResult> rs = e.getResults();
            check(rs != null && rs.size() == 4, "per-op results %s", rs);
            int[] errs = rs.stream().mapToInt(ClientScenarios::errOf).toArray();
            check(Arrays.equals(errs, new int[] {0, 0, KeeperException.Code.BADVERSION.intValue(),
                    KeeperException.Code.RUNTIMEINCONSISTENCY.intValue()}), "per-op errors %s", Arrays.toString(errs));
            check(rs.stream().allMatch(r -> r instanceof OpResult.ErrorResult), "results of a failed multi: %s", rs);
            check(zk.exists(base + "/a", false) == null && zk.exists(base, false).getVersion() == 0,
                    "a failed multi left changes");

            List<OpResult> ok = zk.multi(Arrays.asList(
                    Op.create(base + "/a", b("a"), OPEN, CreateMode.PERSISTENT),
                    Op.create(base + "/s-", b(""), OPEN, CreateMode.PERSISTENT_SEQUENTIAL),
                    Op.setData(base + "/a", b("a2"), 0),
                    Op.check(base, 0),
                    Op.create(base + "/b", b(""), OPEN, CreateMode.PERSISTENT),
                    Op.delete(base + "/b", 0)));
            check(ok.size() == 6, "results %s", ok);
            check(ok.get(0) instanceof OpResult.CreateResult
                    && ((OpResult.CreateResult) ok.get(0)).getPath().equals(base + "/a"), "result 0: %s", ok.get(0));
            check(ok.get(1) instanceof OpResult.CreateResult
                    && ((OpResult.CreateResult) ok.get(1)).getPath().matches(Pattern.quote(base) + "/s-\\d{10}"),
                    "result 1: %s", ok.get(1));
            check(ok.get(2) instanceof OpResult.SetDataResult
                    && ((OpResult.SetDataResult) ok.get(2)).getStat().getVersion() == 1, "result 2: %s", ok.get(2));
            check(ok.get(3) instanceof OpResult.CheckResult, "result 3: %s", ok.get(3));
            check(ok.get(4) instanceof OpResult.CreateResult, "result 4: %s", ok.get(4));
            check(ok.get(5) instanceof OpResult.DeleteResult, "result 5: %s", ok.get(5));
            check("a2".equals(s(zk.getData(base + "/a", false, null))), "multi's setData");

            // The Transaction builder (same request).
            zk.transaction().create(base + "/t", b(""), OPEN, CreateMode.PERSISTENT).delete(base + "/a", 1).commit();
            check(zk.exists(base + "/t", false) != null && zk.exists(base + "/a", false) == null, "transaction");

            // multiRead: per-op results, an error in one does not fail the others.
            List<OpResult> reads = zk.multi(Arrays.asList(Op.getData(base + "/t"), Op.getChildren(base),
                    Op.getData(base + "/missing")));
            check(reads.size() == 3 && reads.get(0) instanceof OpResult.GetDataResult, "multiRead %s", reads);
            List<String> kids = new ArrayList<>(((OpResult.GetChildrenResult) reads.get(1)).getChildren());
            check(kids.size() == 2 && kids.contains("t"), "multiRead children %s", kids);
            check(errOf(reads.get(2)) == KeeperException.Code.NONODE.intValue(), "multiRead missing: %s", reads.get(2));

            // Mixing reads and writes is refused by the client itself.
            try {
                zk.multi(Arrays.asList(Op.getData(base), Op.check(base, 0)));
                throw new AssertionError("a mixed multi was accepted");
            } catch (IllegalArgumentException expected) {
                // ok
            }
        } finally {
            zk.close();
        }
    }

    /** getACL/setACL with digest auth (addAuthInfo); auth scheme; failed auth. */
    static void aclDigest(String hosts) throws Exception {
        String[] h = split(hosts);
        ZooKeeper alice = zk(h[0]);
        ZooKeeper bob = zk(h[1]);
        try {
            alice.addAuthInfo("digest", b("alice:secret"));
            String base = alice.create(uniq("/java-acl"), new byte[0], OPEN, CreateMode.PERSISTENT);
            String p = alice.create(base + "/priv", b("s"), Ids.CREATOR_ALL_ACL, CreateMode.PERSISTENT);
            String digest = DigestAuthenticationProvider.generateDigest("alice:secret");

            Stat st = new Stat();
            List<ACL> acl = alice.getACL(p, st);
            check(acl.equals(Collections.singletonList(new ACL(Perms.ALL, new Id("digest", digest)))),
                    "the auth scheme became %s, expected digest %s", acl, digest);
            check(st.getAversion() == 0, "aversion %d", st.getAversion());

            bob.sync(p);
            expectError(KeeperException.Code.NOAUTH, "getData without auth", () -> bob.getData(p, false, null));
            expectError(KeeperException.Code.NOAUTH, "setData without auth", () -> bob.setData(p, b("x"), -1));
            expectError(KeeperException.Code.NOAUTH, "getACL without READ or ADMIN", () -> bob.getACL(p, null));
            expectError(KeeperException.Code.INVALIDACL, "auth ACL without any auth", () ->
                    bob.create(base + "/bad", b(""), Ids.CREATOR_ALL_ACL, CreateMode.PERSISTENT));

            List<ACL> wider = Arrays.asList(new ACL(Perms.ALL, new Id("digest", digest)), new ACL(Perms.READ, Ids.ANYONE_ID_UNSAFE));
            Stat after = alice.setACL(p, wider, 0);
            check(after.getAversion() == 1, "aversion after setACL %d", after.getAversion());
            expectError(KeeperException.Code.BADVERSION, "setACL with a stale aversion", () -> alice.setACL(p, wider, 0));

            bob.sync(p);
            check("s".equals(s(bob.getData(p, false, null))), "world READ");
            // READ without ADMIN: the digest is masked (order aside, checked at the end).
            List<ACL> masked = bob.getACL(p, null);
            ACL maskedDigest = new ACL(Perms.ALL, new Id("digest", "alice:x"));
            check(masked.size() == 2 && masked.contains(maskedDigest) && masked.contains(wider.get(1)),
                    "getACL without ADMIN returned %s", masked);
            expectError(KeeperException.Code.NOAUTH, "setData with READ only", () -> bob.setData(p, b("x"), -1));

            bob.addAuthInfo("digest", b("alice:secret"));
            check(bob.setData(p, b("by bob"), -1).getVersion() == 1, "setData after addAuthInfo");
            check(new HashSet<>(bob.getACL(p, null)).equals(new HashSet<>(wider)), "getACL with ADMIN is not masked");

            // An ip ACL.
            String ip = alice.create(base + "/ip", b("i"), Collections.singletonList(new ACL(Perms.READ,
                    new Id("ip", "127.0.0.1"))), CreateMode.PERSISTENT);
            ZooKeeper anon = zk(h[2]);
            try {
                anon.sync(ip);
                check("i".equals(s(anon.getData(ip, false, null))), "ip ACL read");
                expectError(KeeperException.Code.NOAUTH, "ip ACL write", () -> anon.setData(ip, b("x"), -1));
            } finally {
                anon.close();
            }

            // Authentication with an unknown scheme fails: AuthFailed, and that client is done.
            Events ev = new Events("authfail");
            ZooKeeper bad = zk(h[2], ev);
            try {
                bad.addAuthInfo("nosuchscheme", b("x"));
                ev.expectState(KeeperState.AuthFailed, 10_000);
                check(waitFor(() -> bad.getState() == ZooKeeper.States.AUTH_FAILED, 5000), "state %s", bad.getState());
            } finally {
                bad.close();
            }

            // ZooKeeper keeps an ACL list in the order it was given (duplicates removed), for
            // create as for setACL, and getACL returns it so.
            List<ACL> withDuplicate = new ArrayList<>(wider);
            withDuplicate.add(wider.get(0));
            String q = alice.create(base + "/ordered", b(""), withDuplicate, CreateMode.PERSISTENT);
            check(alice.getACL(q, null).equals(wider), "create: getACL returned %s, not the order given %s",
                    alice.getACL(q, null), wider);
            check(alice.getACL(p, null).equals(wider), "setACL: getACL returned %s, not the order given %s",
                    alice.getACL(p, null), wider);
            check(bob.getACL(p, null).equals(wider), "getACL order with ADMIN %s", bob.getACL(p, null));
        } finally {
            alice.close();
            bob.close();
        }
    }

    /**
     * The "auth" ACL scheme expands to every authenticated identity of the session, in the order
     * they were added. ZooKeeper removes duplicates from the list as given, before that expansion
     * (PrepRequestProcessor.fixupACL), so an expanded entry equal to a given one stays twice.
     */
    static void aclAuthExpansion(String hosts) throws Exception {
        ZooKeeper zk = zk(hosts);
        try {
            zk.addAuthInfo("digest", b("alice:secret"));
            zk.addAuthInfo("digest", b("bob:secret"));
            String alice = DigestAuthenticationProvider.generateDigest("alice:secret");
            String bob = DigestAuthenticationProvider.generateDigest("bob:secret");
            String base = zk.create(uniq("/java-aclx"), new byte[0], OPEN, CreateMode.PERSISTENT);

            String p = zk.create(base + "/creator", b(""), Ids.CREATOR_ALL_ACL, CreateMode.PERSISTENT);
            List<ACL> got = zk.getACL(p, null);
            check(got.equals(Arrays.asList(new ACL(Perms.ALL, new Id("digest", alice)),
                    new ACL(Perms.ALL, new Id("digest", bob)))), "auth expanded to %s", got);

            ACL aliceAll = new ACL(Perms.ALL, new Id("digest", alice));
            String q = zk.create(base + "/twice", b(""), Arrays.asList(new ACL(Perms.READ, new Id("auth", "")), aliceAll),
                    CreateMode.PERSISTENT);
            List<ACL> twice = zk.getACL(q, null);
            List<ACL> want = Arrays.asList(new ACL(Perms.READ, new Id("digest", alice)),
                    new ACL(Perms.READ, new Id("digest", bob)), aliceAll);
            check(twice.equals(want), "[auth READ, digest:alice ALL] became %s, expected %s", twice, want);

            String r = zk.create(base + "/dup", b(""), Arrays.asList(new ACL(Perms.ALL, new Id("auth", "")), aliceAll),
                    CreateMode.PERSISTENT);
            List<ACL> dup = zk.getACL(r, null);
            List<ACL> wantDup = Arrays.asList(aliceAll, new ACL(Perms.ALL, new Id("digest", bob)), aliceAll);
            check(dup.equals(wantDup), "[auth ALL, digest:alice ALL] became %s; ZooKeeper keeps %s (duplicates are "
                    + "removed before auth is expanded)", dup, wantDup);
        } finally {
            zk.close();
        }
    }

    /** getEphemerals (with and without prefix) and getAllChildrenNumber. */
    static void ephemeralsAndCounts(String hosts) throws Exception {
        ZooKeeper zk = zk(hosts);
        ZooKeeper other = zk(hosts);
        try {
            String base = zk.create(uniq("/java-eph"), new byte[0], OPEN, CreateMode.PERSISTENT);
            zk.create(base + "/x", b(""), OPEN, CreateMode.PERSISTENT);
            zk.create(base + "/y", b(""), OPEN, CreateMode.PERSISTENT);
            zk.create(base + "/y/z", b(""), OPEN, CreateMode.PERSISTENT);
            zk.create(base + "/x/e1", b(""), OPEN, CreateMode.EPHEMERAL);
            zk.create(base + "/x/e2", b(""), OPEN, CreateMode.EPHEMERAL);
            zk.create(base + "/y/e3", b(""), OPEN, CreateMode.EPHEMERAL);
            other.sync(base);
            other.create(base + "/x/theirs", b(""), OPEN, CreateMode.EPHEMERAL);

            List<String> mine = new ArrayList<>(zk.getEphemerals(base));
            Collections.sort(mine);
            check(mine.equals(Arrays.asList(base + "/x/e1", base + "/x/e2", base + "/y/e3")), "getEphemerals(base) %s", mine);
            List<String> inX = new ArrayList<>(zk.getEphemerals(base + "/x"));
            Collections.sort(inX);
            check(inX.equals(Arrays.asList(base + "/x/e1", base + "/x/e2")), "getEphemerals(prefix) %s", inX);
            List<String> prefix = zk.getEphemerals(base + "/x/e");
            check(prefix.size() == 2, "getEphemerals is a prefix match on the path: %s", prefix);
            List<String> all = zk.getEphemerals();
            check(all.size() == 3 && all.containsAll(mine), "getEphemerals() %s", all);
            check(other.getEphemerals().equals(Collections.singletonList(base + "/x/theirs")), "other's ephemerals %s",
                    other.getEphemerals());

            zk.sync(base);
            check(zk.getAllChildrenNumber(base) == 7, "getAllChildrenNumber(base) = %d, expected 7",
                    zk.getAllChildrenNumber(base));
            check(zk.getAllChildrenNumber(base + "/y") == 2, "getAllChildrenNumber(y)");
            check(zk.getAllChildrenNumber(base + "/x/e1") == 0, "getAllChildrenNumber(leaf)");
            expectError(KeeperException.Code.NONODE, "getAllChildrenNumber(missing)", () ->
                    zk.getAllChildrenNumber(base + "/missing"));
        } finally {
            zk.close();
            other.close();
        }
    }

    /** addWatch PERSISTENT and PERSISTENT_RECURSIVE; removeWatches / removeAllWatches. */
    static void persistentWatches(String hosts) throws Exception {
        String[] h = split(hosts);
        ZooKeeper zk = zk(h[0]);
        ZooKeeper w = zk(h[1]);
        try {
            String base = zk.create(uniq("/java-pw"), new byte[0], OPEN, CreateMode.PERSISTENT);
            String p = zk.create(base + "/p", b(""), OPEN, CreateMode.PERSISTENT);
            Events pers = new Events("persistent");
            Events rec = new Events("recursive");
            zk.addWatch(p, pers, AddWatchMode.PERSISTENT);
            zk.addWatch(base, rec, AddWatchMode.PERSISTENT_RECURSIVE);
            w.sync(p);
            w.setData(p, b("1"), -1);
            w.setData(p, b("2"), -1);
            w.create(p + "/q", b(""), OPEN, CreateMode.PERSISTENT);
            w.create(p + "/q/r", b(""), OPEN, CreateMode.PERSISTENT);
            w.delete(p + "/q/r", -1);
            w.delete(p + "/q", -1);

            pers.expect(EventType.NodeDataChanged, p);
            pers.expect(EventType.NodeDataChanged, p);
            pers.expect(EventType.NodeChildrenChanged, p);
            pers.expect(EventType.NodeChildrenChanged, p);
            pers.expectNone(300);

            rec.expect(EventType.NodeDataChanged, p);
            rec.expect(EventType.NodeDataChanged, p);
            rec.expect(EventType.NodeCreated, p + "/q");
            rec.expect(EventType.NodeCreated, p + "/q/r");
            rec.expect(EventType.NodeDeleted, p + "/q/r");
            rec.expect(EventType.NodeDeleted, p + "/q");
            rec.expectNone(300);

            // removeWatches: the persistent watch goes (its watcher is told), the recursive stays.
            zk.removeWatches(p, pers, Watcher.WatcherType.Any, false);
            WatchedEvent removed = pers.next(5000);
            check(removed != null && removed.getType() == EventType.PersistentWatchRemoved && p.equals(removed.getPath()),
                    "removeWatches told the watcher %s", removed);
            expectError(KeeperException.Code.NOWATCHER, "removeWatches of a removed watch", () ->
                    zk.removeWatches(p, pers, Watcher.WatcherType.Any, false));
            w.setData(p, b("3"), -1);
            rec.expect(EventType.NodeDataChanged, p);
            pers.expectNone(300);

            // A one-shot data watch removed by type.
            Events oneShot = new Events("one-shot");
            zk.getData(p, oneShot, null);
            zk.removeWatches(p, oneShot, Watcher.WatcherType.Data, false);
            oneShot.expect(EventType.DataWatchRemoved, p);
            expectError(KeeperException.Code.NOWATCHER, "removeWatches(Children) with only a data watch", () ->
                    zk.removeWatches(p, rec, Watcher.WatcherType.Children, false));

            // removeAllWatches on base drops the recursive watch.
            zk.removeAllWatches(base, Watcher.WatcherType.Any, false);
            w.setData(p, b("4"), -1);
            w.create(base + "/late", b(""), OPEN, CreateMode.PERSISTENT);
            // The recursive watcher was told of its removal; nothing else arrives.
            WatchedEvent gone = rec.next(5000);
            check(gone != null && gone.getType() == EventType.PersistentWatchRemoved, "removeAllWatches told %s", gone);
            rec.expectNone(500);
        } finally {
            zk.close();
            w.close();
        }
    }

    /** sync then read across servers sees the other session's writes; whoAmI. */
    static void syncAndWhoAmI(String hosts) throws Exception {
        String[] h = split(hosts);
        ZooKeeper reader = zk(h[0]);
        ZooKeeper writer = zk(h[1]);
        try {
            String base = writer.create(uniq("/java-sync"), new byte[0], OPEN, CreateMode.PERSISTENT);
            String v = writer.create(base + "/v", b("0"), OPEN, CreateMode.PERSISTENT);
            for (int i = 1; i <= 10; i++) {
                writer.setData(v, b(Integer.toString(i)), -1);
                CountDownLatch done = new CountDownLatch(1);
                AtomicInteger rc = new AtomicInteger(-999);
                String[] got = new String[1];
                reader.sync(v, (r, path, ctx) -> {
                    rc.set(r);
                    got[0] = path;
                    done.countDown();
                }, null);
                check(done.await(10, TimeUnit.SECONDS), "sync not answered");
                check(rc.get() == 0 && v.equals(got[0]), "sync rc %d path %s", rc.get(), got[0]);
                String read = s(reader.getData(v, false, null));
                check(Integer.toString(i).equals(read), "read after sync: %s, expected %d", read, i);
            }
            reader.sync(base + "/missing"); // sync does not look the path up

            List<ClientInfo> who = reader.whoAmI();
            check(who.size() == 1 && who.get(0).getAuthScheme().equals("ip") && who.get(0).getUser().equals("127.0.0.1"),
                    "whoAmI %s", describe(who));
            reader.addAuthInfo("digest", b("carol:pw"));
            List<ClientInfo> who2 = reader.whoAmI();
            List<String> ids = who2.stream().map(c -> c.getAuthScheme() + ":" + c.getUser()).sorted()
                    .collect(Collectors.toList());
            check(ids.equals(Arrays.asList("digest:carol", "ip:127.0.0.1")), "whoAmI after addAuthInfo %s", ids);
        } finally {
            reader.close();
            writer.close();
        }
    }

    /**
     * The asynchronous API with many requests in flight: replies come back in request order (the
     * Java client drops the connection on "Xid out of order") and each sees the writes before it.
     */
    static void asyncPipeline(String hosts) throws Exception {
        ZooKeeper zk = zk(hosts);
        try {
            String base = zk.create(uniq("/java-async"), new byte[0], OPEN, CreateMode.PERSISTENT);
            int n = 200;
            List<String> order = Collections.synchronizedList(new ArrayList<>());
            List<String> problems = Collections.synchronizedList(new ArrayList<>());
            CountDownLatch done = new CountDownLatch(5 * n);
            for (int i = 0; i < n; i++) {
                String tag = Integer.toString(i);
                String p = base + "/n" + i;
                zk.create(p, b(tag), OPEN, CreateMode.PERSISTENT, (rc, path, ctx, name) -> {
                    order.add("c" + ctx);
                    if (rc != 0 || !p.equals(name)) {
                        problems.add("create " + p + " rc " + rc);
                    }
                    done.countDown();
                }, tag);
                zk.setData(p, b(tag + "!"), 0, (rc, path, ctx, stat) -> {
                    order.add("s" + ctx);
                    if (rc != 0 || stat.getVersion() != 1) {
                        problems.add("setData " + p + " rc " + rc);
                    }
                    done.countDown();
                }, tag);
                zk.getData(p, false, (rc, path, ctx, data, stat) -> {
                    order.add("g" + ctx);
                    if (rc != 0 || !(ctx + "!").equals(s(data))) {
                        problems.add("getData " + p + " rc " + rc + " data " + s(data));
                    }
                    done.countDown();
                }, tag);
                zk.exists(base + "/missing" + i, false, (rc, path, ctx, stat) -> {
                    order.add("e" + ctx);
                    if (rc != KeeperException.Code.NONODE.intValue()) {
                        problems.add("exists missing rc " + rc);
                    }
                    done.countDown();
                }, tag);
                zk.sync(p, (rc, path, ctx) -> {
                    order.add("y" + ctx);
                    if (rc != 0) {
                        problems.add("sync rc " + rc);
                    }
                    done.countDown();
                }, tag);
            }
            check(done.await(30, TimeUnit.SECONDS), "%d of %d callbacks missing", done.getCount(), 5 * n);
            check(problems.isEmpty(), "failed requests: %s", problems.subList(0, Math.min(10, problems.size())));
            List<String> want = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                for (String k : new String[] {"c", "s", "g", "e", "y"}) {
                    want.add(k + i);
                }
            }
            check(order.equals(want), "callbacks out of order");
            check(zk.getChildren(base, false).size() == n, "children");
        } finally {
            zk.close();
        }
    }

    static String describe(List<ClientInfo> who) {
        return who.stream().map(c -> c.getAuthScheme() + ":" + c.getUser()).collect(Collectors.joining(", ", "[", "]"));
    }

    static int remotePort(ZooKeeper zk) {
        // ClientCnxn.toString: "... remoteserver:/127.0.0.1:PORT lastZxid: ..."
        Matcher m = Pattern.compile("remoteserver:\\S*:(\\d+)").matcher(zk.toString());
        return m.find() ? Integer.parseInt(m.group(1)) : -1;
    }

    /** A session moves to another server: same session id, its ephemeral and watches kept. */
    static void sessionMoves(String hosts) throws Exception {
        String[] h = split(hosts);
        Events states = new Events("states");
        ZooKeeper zk = zk(h[0], states);
        ZooKeeper w = zk(h[2]);
        try {
            long sid = zk.getSessionId();
            byte[] passwd = zk.getSessionPasswd();
            int firstPort = remotePort(zk);
            check(firstPort == Integer.parseInt(h[0].split(":")[1]), "connected to %d, not %s (%s)", firstPort, h[0], zk);
            String base = zk.create(uniq("/java-move"), new byte[0], OPEN, CreateMode.PERSISTENT);
            String eph = zk.create(base + "/eph", b(""), OPEN, CreateMode.EPHEMERAL);
            String watched = zk.create(base + "/watched", b("0"), OPEN, CreateMode.PERSISTENT);
            Events data = new Events("data");
            Events exists = new Events("exists");
            Events child = new Events("child");
            zk.getData(watched, data, null);
            zk.exists(base + "/later", exists);
            // A persistent recursive watch on a subtree of its own (ZooKeeper 3.8.0 keeps one watch
            // mode per path and connection: a recursive watch on `base` would silence the child
            // watch there).
            String tree = zk.create(base + "/tree", b(""), OPEN, CreateMode.PERSISTENT);
            zk.getChildren(base, child);
            Events rec = new Events("recursive");
            zk.addWatch(tree, rec, AddWatchMode.PERSISTENT_RECURSIVE);

            // The current server is not in the new list: the client must move (and re-attach).
            zk.updateServerList(h[1]);
            states.expectState(KeeperState.Disconnected, 10_000);
            states.expectState(KeeperState.SyncConnected, 20_000);
            check(zk.getSessionId() == sid, "session id changed: %x -> %x", sid, zk.getSessionId());
            int port = remotePort(zk);
            check(port == Integer.parseInt(h[1].split(":")[1]), "now connected to %d, expected %s", port, h[1]);
            Stat st = zk.exists(eph, false);
            check(st != null && st.getEphemeralOwner() == sid, "the ephemeral after the move: %s", st);

            // The watches set before the move were re-registered (setWatches) on the new server.
            w.sync(watched);
            w.setData(watched, b("1"), -1);
            data.expect(EventType.NodeDataChanged, watched);
            w.create(base + "/later", b(""), OPEN, CreateMode.PERSISTENT);
            exists.expect(EventType.NodeCreated, base + "/later");
            child.expect(EventType.NodeChildrenChanged, base);
            // The persistent recursive watch too (setWatches2).
            w.setData(tree, b("t"), -1);
            rec.expect(EventType.NodeDataChanged, tree);
            w.create(tree + "/x", b(""), OPEN, CreateMode.PERSISTENT);
            rec.expect(EventType.NodeCreated, tree + "/x");
            w.create(tree + "/x/y", b(""), OPEN, CreateMode.PERSISTENT);
            rec.expect(EventType.NodeCreated, tree + "/x/y");

            // The session's password is checked: a wrong one gets an expired session.
            Events bad = new Events("bad");
            byte[] wrong = passwd.clone();
            wrong[0] ^= 1;
            ZooKeeper impostor = new ZooKeeper(h[2], 10_000, bad, sid, wrong);
            try {
                bad.expectState(KeeperState.Expired, 15_000);
            } finally {
                impostor.close();
            }
            check(zk.getState().isConnected(), "the real client lost its session: %s", zk.getState());

            zk.close();
            w.sync(base);
            check(w.exists(eph, false) == null, "the ephemeral outlived the closed session");
        } finally {
            zk.close();
            w.close();
        }
    }

    /**
     * A client with a JAAS "Client" section (DIGEST-MD5 via DigestLoginModule) against a server
     * without SASL. The client sends a SASL request (op 102, empty token) first; ZooKeeper answers
     * it OK with a null token, the client's DIGEST-MD5 exchange fails on that ("the quorum
     * member's saslToken is null") and the client goes AUTH_FAILED: an AuthFailed event, and its
     * requests fail with AUTHFAILED. Nothing hangs and the connection does not flap.
     */
    static void jaasClientSection(String hosts) throws Exception {
        String jaas = System.getProperty("java.security.auth.login.config");
        check(jaas != null, "run with -Djava.security.auth.login.config=FILE (a Client section)");
        Events ev = new Events("sasl-client");
        ZooKeeper zk = new ZooKeeper(hosts, 10_000, ev);
        try {
            ev.expectState(KeeperState.SyncConnected, 20_000);
            ev.expectState(KeeperState.AuthFailed, 10_000);
            check(waitFor(() -> zk.getState() == ZooKeeper.States.AUTH_FAILED, 5000), "state %s", zk.getState());
            expectError(KeeperException.Code.AUTHFAILED, "a request after the failed SASL exchange", () ->
                    zk.exists("/", false));
        } finally {
            zk.close();
        }
    }

    /**
     * Kafka's usual JAAS file: sections for Kafka itself, no "Client" section. The ZooKeeper
     * client then sends no SASL request at all and works as usual.
     */
    static void jaasWithoutClientSection(String hosts) throws Exception {
        String jaas = System.getProperty("java.security.auth.login.config");
        check(jaas != null, "run with -Djava.security.auth.login.config=FILE (no Client section)");
        Events ev = new Events("no-client-section");
        ZooKeeper zk = zk(hosts, ev);
        try {
            String base = zk.create(uniq("/java-jaas"), b("x"), OPEN, CreateMode.PERSISTENT);
            check("x".equals(s(zk.getData(base, false, null))), "read back");
            zk.setData(base, b("y"), 0);
            zk.delete(base, 1);
            List<String> seen = new ArrayList<>();
            for (WatchedEvent e; (e = ev.next(200)) != null;) {
                seen.add(e.getState().toString());
            }
            // The client itself reports AuthFailed first (its JAAS file has no Client section: "will
            // continue connection without SASL"), then connects; nothing else.
            check(seen.equals(Arrays.asList("AuthFailed", "SyncConnected")), "connection events %s", seen);
            check(zk.getState() == ZooKeeper.States.CONNECTED, "state %s", zk.getState());
        } finally {
            zk.close();
        }
    }
}
