package synod.zkcompat;

import static synod.zkcompat.Scenarios.b;
import static synod.zkcompat.Scenarios.check;
import static synod.zkcompat.Scenarios.curator;
import static synod.zkcompat.Scenarios.s;
import static synod.zkcompat.Scenarios.uniq;
import static synod.zkcompat.Scenarios.waitFor;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.cache.PathChildrenCache;
import org.apache.curator.framework.recipes.cache.PathChildrenCacheEvent;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.framework.state.ConnectionState;

/** Curator 5 recipes, each with several clients (sessions) spread over the servers. */
final class CuratorScenarios {
    private CuratorScenarios() {}

    /** Two latches: one leader; when it closes, leadership moves to the other. */
    static void leaderLatch(String hosts) throws Exception {
        String path = uniq("/java-latch");
        try (CuratorFramework c1 = curator(hosts); CuratorFramework c2 = curator(hosts)) {
            LeaderLatch a = new LeaderLatch(c1, path, "a");
            LeaderLatch b = new LeaderLatch(c2, path, "b");
            a.start();
            b.start();
            check(waitFor(() -> a.hasLeadership() || b.hasLeadership(), 15_000), "no latch became leader");
            Thread.sleep(300);
            check(a.hasLeadership() ^ b.hasLeadership(), "exactly one leader expected: a=%s b=%s", a.hasLeadership(),
                    b.hasLeadership());
            LeaderLatch leader = a.hasLeadership() ? a : b;
            LeaderLatch other = leader == a ? b : a;
            check(waitFor(() -> other.getParticipants().size() == 2, 10_000), "participants: %s",
                    other.getParticipants());
            check(other.getLeader().getId().equals(leader.getId()), "the follower sees leader %s, not %s",
                    other.getLeader().getId(), leader.getId());
            leader.close();
            check(other.await(15, TimeUnit.SECONDS), "leadership did not move to %s after %s closed", other.getId(),
                    leader.getId());
            check(waitFor(() -> other.getParticipants().size() == 1, 10_000), "participants after close: %s",
                    other.getParticipants());
            check(other.getLeader().getId().equals(other.getId()), "leader after move: %s", other.getLeader());
            other.close();
        }
    }

    /** Two selectors: one takes leadership at a time; when it gives it up the other takes it. */
    static void leaderSelector(String hosts) throws Exception {
        String path = uniq("/java-selector");
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger maxInside = new AtomicInteger();
        List<String> order = Collections.synchronizedList(new ArrayList<>());
        Map<String, CountDownLatch> release = new ConcurrentHashMap<>();
        release.put("a", new CountDownLatch(1));
        release.put("b", new CountDownLatch(1));
        try (CuratorFramework c1 = curator(hosts); CuratorFramework c2 = curator(hosts)) {
            List<LeaderSelector> selectors = new ArrayList<>();
            for (String id : new String[] {"a", "b"}) {
                LeaderSelector s = new LeaderSelector(id.equals("a") ? c1 : c2, path, new LeaderSelectorListenerAdapter() {
                    @Override
                    public void takeLeadership(CuratorFramework client) throws Exception {
                        maxInside.accumulateAndGet(inside.incrementAndGet(), Math::max);
                        order.add(id);
                        try {
                            release.get(id).await(30, TimeUnit.SECONDS);
                        } finally {
                            inside.decrementAndGet();
                        }
                    }
                });
                s.setId(id);
                selectors.add(s);
            }
            selectors.forEach(LeaderSelector::start);
            check(waitFor(() -> order.size() == 1, 15_000), "nobody took leadership");
            Thread.sleep(300);
            check(order.size() == 1 && inside.get() == 1, "two leaders at once: %s", order);
            String first = order.get(0);
            for (LeaderSelector s : selectors) {
                check(waitFor(() -> s.getParticipants().size() == 2, 10_000), "participants: %s", s.getParticipants());
                check(s.getLeader().getId().equals(first), "%s sees leader %s, not %s", s.getId(), s.getLeader().getId(),
                        first);
            }
            release.get(first).countDown();
            check(waitFor(() -> order.size() == 2, 15_000), "leadership did not move after %s gave it up", first);
            check(!order.get(1).equals(first), "the same selector led twice: %s", order);
            release.get(order.get(1)).countDown();
            check(waitFor(() -> inside.get() == 0, 10_000), "a leader did not finish");
            check(maxInside.get() == 1, "%d leaders at once", maxInside.get());
            selectors.forEach(LeaderSelector::close);
        }
    }

    /** Three clients contend for one InterProcessMutex; never two holders at once, no lost update. */
    static void mutex(String hosts) throws Exception {
        String path = uniq("/java-mutex");
        int clients = 3;
        int rounds = 8;
        List<CuratorFramework> cs = new ArrayList<>();
        ExecutorService pool = Executors.newFixedThreadPool(clients);
        try {
            for (int i = 0; i < clients; i++) {
                cs.add(curator(hosts));
            }
            AtomicInteger inside = new AtomicInteger();
            AtomicInteger violations = new AtomicInteger();
            int[] counter = {0}; // deliberately unsynchronized: only the lock protects it
            List<Future<?>> fs = new ArrayList<>();
            for (CuratorFramework c : cs) {
                fs.add(pool.submit(() -> {
                    InterProcessMutex m = new InterProcessMutex(c, path);
                    for (int r = 0; r < rounds; r++) {
                        check(m.acquire(20, TimeUnit.SECONDS), "lock not acquired within 20 s");
                        try {
                            if (inside.incrementAndGet() != 1) {
                                violations.incrementAndGet();
                            }
                            int v = counter[0];
                            Thread.sleep(5);
                            counter[0] = v + 1;
                            inside.decrementAndGet();
                        } finally {
                            m.release();
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get(40, TimeUnit.SECONDS);
            }
            check(violations.get() == 0, "%d times two holders at once", violations.get());
            check(counter[0] == clients * rounds, "lost updates under the lock: %d != %d", counter[0], clients * rounds);

            // Held by one client: another cannot take it; reentrant for the holder; free after release.
            InterProcessMutex m0 = new InterProcessMutex(cs.get(0), path);
            InterProcessMutex m1 = new InterProcessMutex(cs.get(1), path);
            check(m0.acquire(10, TimeUnit.SECONDS), "m0 not acquired");
            check(m0.acquire(1, TimeUnit.SECONDS), "not reentrant");
            check(!m1.acquire(500, TimeUnit.MILLISECONDS), "the other client took a held lock");
            // The loser removed its node through its own server: c0's may not have applied that yet.
            check(waitFor(() -> m0.getParticipantNodes().size() == 1, 5000), "participants: %s",
                    m0.getParticipantNodes());
            m0.release();
            check(m0.isAcquiredInThisProcess(), "released once of two, still held");
            m0.release();
            check(m1.acquire(10, TimeUnit.SECONDS), "lock not free after release");
            m1.release();
            check(waitFor(() -> m0.getParticipantNodes().isEmpty(), 5000), "lock nodes left: %s",
                    m0.getParticipantNodes());
        } finally {
            pool.shutdownNow();
            cs.forEach(CuratorFramework::close);
        }
    }

    /** InterProcessSemaphoreV2 with 2 leases and 4 clients: never more than 2 holders. */
    static void semaphore(String hosts) throws Exception {
        String path = uniq("/java-semaphore");
        int clients = 4;
        List<CuratorFramework> cs = new ArrayList<>();
        ExecutorService pool = Executors.newFixedThreadPool(clients);
        try {
            for (int i = 0; i < clients; i++) {
                cs.add(curator(hosts));
            }
            AtomicInteger inside = new AtomicInteger();
            AtomicInteger max = new AtomicInteger();
            List<Future<?>> fs = new ArrayList<>();
            for (CuratorFramework c : cs) {
                fs.add(pool.submit(() -> {
                    InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(c, path, 2);
                    for (int r = 0; r < 5; r++) {
                        Lease l = sem.acquire(20, TimeUnit.SECONDS);
                        check(l != null, "no lease within 20 s");
                        try {
                            max.accumulateAndGet(inside.incrementAndGet(), Math::max);
                            Thread.sleep(20);
                            inside.decrementAndGet();
                        } finally {
                            sem.returnLease(l);
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get(40, TimeUnit.SECONDS);
            }
            check(max.get() <= 2, "%d holders of 2 leases at once", max.get());

            InterProcessSemaphoreV2 s0 = new InterProcessSemaphoreV2(cs.get(0), path, 2);
            InterProcessSemaphoreV2 s1 = new InterProcessSemaphoreV2(cs.get(1), path, 2);
            var both = s0.acquire(2, 10, TimeUnit.SECONDS);
            check(both != null && both.size() == 2, "two leases not acquired");
            check(s1.acquire(500, TimeUnit.MILLISECONDS) == null, "a third lease was granted");
            check(waitFor(() -> s0.getParticipantNodes().size() == 2, 5000), "participants: %s",
                    s0.getParticipantNodes());
            s0.returnLease(both.iterator().next());
            Lease l = s1.acquire(10, TimeUnit.SECONDS);
            check(l != null, "a returned lease was not granted");
            s1.returnLease(l);
            s0.returnAll(both);
        } finally {
            pool.shutdownNow();
            cs.forEach(CuratorFramework::close);
        }
    }

    /** A DistributedBarrier holds two waiters (other clients) until it is removed. */
    static void barrier(String hosts) throws Exception {
        String path = uniq("/java-barrier");
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (CuratorFramework c0 = curator(hosts); CuratorFramework c1 = curator(hosts);
                CuratorFramework c2 = curator(hosts)) {
            DistributedBarrier owner = new DistributedBarrier(c0, path);
            owner.setBarrier();
            // The waiters' servers may trail the owner's: wait until they have the barrier node.
            check(waitFor(() -> c1.checkExists().forPath(path) != null && c2.checkExists().forPath(path) != null,
                    10_000), "the barrier node never reached the waiters' servers");
            check(!new DistributedBarrier(c1, path).waitOnBarrier(500, TimeUnit.MILLISECONDS),
                    "a set barrier let a waiter through");
            Future<Boolean> w1 = pool.submit(() -> new DistributedBarrier(c1, path).waitOnBarrier(20, TimeUnit.SECONDS));
            Future<Boolean> w2 = pool.submit(() -> new DistributedBarrier(c2, path).waitOnBarrier(20, TimeUnit.SECONDS));
            Thread.sleep(500);
            check(!w1.isDone() && !w2.isDone(), "a waiter passed the set barrier");
            owner.removeBarrier();
            check(w1.get(10, TimeUnit.SECONDS), "waiter 1 not released");
            check(w2.get(10, TimeUnit.SECONDS), "waiter 2 not released");
        } finally {
            pool.shutdownNow();
        }
    }

    static PathChildrenCacheEvent nextChildEvent(BlockingQueue<PathChildrenCacheEvent> q) throws InterruptedException {
        while (true) {
            PathChildrenCacheEvent e = q.poll(10, TimeUnit.SECONDS);
            check(e != null, "no PathChildrenCache event within 10 s");
            switch (e.getType()) {
                case CONNECTION_SUSPENDED:
                case CONNECTION_RECONNECTED:
                case CONNECTION_LOST:
                    continue;
                default:
                    return e;
            }
        }
    }

    static void expectChild(BlockingQueue<PathChildrenCacheEvent> q, PathChildrenCacheEvent.Type type, String path,
            String data) throws InterruptedException {
        PathChildrenCacheEvent e = nextChildEvent(q);
        check(e.getType() == type, "expected %s %s, got %s", type, path, e);
        if (path != null) {
            check(e.getData() != null && path.equals(e.getData().getPath()), "expected %s %s, got %s", type, path, e);
            if (data != null) {
                check(data.equals(s(e.getData().getData())), "expected data %s for %s, got %s", data, path,
                        s(e.getData().getData()));
            }
        }
    }

    /** PathChildrenCache on one client sees another client's create, update and delete. */
    static void pathChildrenCache(String hosts) throws Exception {
        String path = uniq("/java-pcc");
        try (CuratorFramework writer = curator(hosts); CuratorFramework reader = curator(hosts)) {
            writer.create().forPath(path);
            writer.create().forPath(path + "/pre", b("0"));
            // Reads are served by the reader's own server: sync first, or it may not have the
            // writer's creates yet (sequential consistency; under Mencius it often has not).
            CountDownLatch synced = new CountDownLatch(1);
            reader.getZookeeperClient().getZooKeeper().sync(path, (rc, p, ctx) -> synced.countDown(), null);
            check(synced.await(10, TimeUnit.SECONDS), "sync of %s", path);
            BlockingQueue<PathChildrenCacheEvent> q = new LinkedBlockingQueue<>();
            try (PathChildrenCache cache = new PathChildrenCache(reader, path, true)) {
                cache.getListenable().addListener((c, e) -> q.add(e));
                cache.start(PathChildrenCache.StartMode.POST_INITIALIZED_EVENT);
                expectChild(q, PathChildrenCacheEvent.Type.CHILD_ADDED, path + "/pre", "0");
                expectChild(q, PathChildrenCacheEvent.Type.INITIALIZED, null, null);
                writer.create().forPath(path + "/a", b("1"));
                expectChild(q, PathChildrenCacheEvent.Type.CHILD_ADDED, path + "/a", "1");
                writer.setData().forPath(path + "/a", b("2"));
                expectChild(q, PathChildrenCacheEvent.Type.CHILD_UPDATED, path + "/a", "2");
                writer.delete().forPath(path + "/a");
                expectChild(q, PathChildrenCacheEvent.Type.CHILD_REMOVED, path + "/a", null);
                List<ChildData> now = cache.getCurrentData();
                check(now.size() == 1 && now.get(0).getPath().equals(path + "/pre"), "cache holds %s", now);
            }
        }
    }

    static void expectLine(BlockingQueue<String> q, String want) throws InterruptedException {
        String got = q.poll(10, TimeUnit.SECONDS);
        check(want.equals(got), "CuratorCache: expected event '%s', got '%s' (then %s)", want, got, q);
    }

    /** CuratorCache (addWatch PERSISTENT_RECURSIVE) sees creates, changes and deletes, nested ones too. */
    static void curatorCache(String hosts) throws Exception {
        String path = uniq("/java-cc");
        try (CuratorFramework writer = curator(hosts); CuratorFramework reader = curator(hosts)) {
            writer.create().forPath(path, b("root"));
            // As in pathChildrenCache: the reader's server serves its reads, so sync first or
            // it may not have the writer's create yet (ZooKeeper's consistency guarantee).
            CountDownLatch synced = new CountDownLatch(1);
            reader.getZookeeperClient().getZooKeeper().sync(path, (rc, p, ctx) -> synced.countDown(), null);
            check(synced.await(10, TimeUnit.SECONDS), "sync of %s", path);
            BlockingQueue<String> q = new LinkedBlockingQueue<>();
            try (CuratorCache cache = CuratorCache.build(reader, path)) {
                cache.listenable().addListener(CuratorCacheListener.builder()
                        .forCreates(n -> q.add("create " + n.getPath() + " " + s(n.getData())))
                        .forChanges((o, n) -> q.add("change " + n.getPath() + " " + s(o.getData()) + "->" + s(n.getData())))
                        .forDeletes(o -> q.add("delete " + o.getPath()))
                        .forInitialized(() -> q.add("initialized"))
                        .build());
                cache.start();
                expectLine(q, "create " + path + " root");
                expectLine(q, "initialized");
                writer.create().forPath(path + "/a", b("1"));
                expectLine(q, "create " + path + "/a 1");
                writer.create().forPath(path + "/a/b", b("x"));
                expectLine(q, "create " + path + "/a/b x");
                writer.setData().forPath(path + "/a", b("2"));
                expectLine(q, "change " + path + "/a 1->2");
                writer.setData().forPath(path + "/a/b", b("y"));
                expectLine(q, "change " + path + "/a/b x->y");
                writer.delete().forPath(path + "/a/b");
                expectLine(q, "delete " + path + "/a/b");
                writer.delete().forPath(path + "/a");
                expectLine(q, "delete " + path + "/a");
                check(cache.size() == 1, "cache holds %d nodes", cache.size());
                String extra = q.poll(300, TimeUnit.MILLISECONDS);
                check(extra == null, "unexpected CuratorCache event %s", extra);
            }
        }
    }

    /** SharedCount: two clients race trySetCount; every increment lands once; a stale version loses. */
    static void sharedCount(String hosts) throws Exception {
        String path = uniq("/java-count");
        int per = 25;
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (CuratorFramework c1 = curator(hosts); CuratorFramework c2 = curator(hosts)) {
            SharedCount s1 = new SharedCount(c1, path, 0);
            SharedCount s2 = new SharedCount(c2, path, 0);
            s1.start();
            s2.start();
            AtomicInteger lost = new AtomicInteger();
            List<Future<?>> fs = new ArrayList<>();
            for (SharedCount sc : new SharedCount[] {s1, s2}) {
                fs.add(pool.submit(() -> {
                    for (int i = 0; i < per; i++) {
                        while (true) {
                            VersionedValue<Integer> v = sc.getVersionedValue();
                            if (sc.trySetCount(v, v.getValue() + 1)) {
                                break;
                            }
                            lost.incrementAndGet();
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get(40, TimeUnit.SECONDS);
            }
            check(waitFor(() -> s1.getCount() == 2 * per && s2.getCount() == 2 * per, 10_000),
                    "counts %d and %d, expected %d (%d lost races)", s1.getCount(), s2.getCount(), 2 * per, lost.get());

            VersionedValue<Integer> stale = s1.getVersionedValue();
            s2.setCount(100);
            check(!s1.trySetCount(stale, 7), "trySetCount with a stale version succeeded");
            check(waitFor(() -> s1.getCount() == 100, 5000), "s1 sees %d, not 100", s1.getCount());
            s1.close();
            s2.close();
        } finally {
            pool.shutdownNow();
        }
    }

    static final QueueSerializer<String> STRINGS = new QueueSerializer<>() {
        @Override
        public byte[] serialize(String item) {
            return b(item);
        }

        @Override
        public String deserialize(byte[] bytes) {
            return s(bytes);
        }
    };

    static QueueConsumer<String> collector(List<String> into) {
        return new QueueConsumer<>() {
            @Override
            public void consumeMessage(String message) {
                into.add(message);
            }

            @Override
            public void stateChanged(CuratorFramework client, ConnectionState newState) {}
        };
    }

    /** DistributedQueue: one consumer gets the items in order; two consumers get each item once. */
    static void distributedQueue(String hosts) throws Exception {
        try (CuratorFramework producer = curator(hosts); CuratorFramework c1 = curator(hosts);
                CuratorFramework c2 = curator(hosts)) {
            String path = uniq("/java-queue");
            List<String> got = Collections.synchronizedList(new ArrayList<>());
            List<String> want = new ArrayList<>();
            try (DistributedQueue<String> consumer =
                            QueueBuilder.builder(c1, collector(got), STRINGS, path).buildQueue();
                    DistributedQueue<String> prod =
                            QueueBuilder.builder(producer, null, STRINGS, path).putInBackground(false).buildQueue()) {
                consumer.start();
                prod.start();
                for (int i = 0; i < 20; i++) {
                    want.add(String.format("item-%02d", i));
                    prod.put(want.get(i));
                }
                check(waitFor(() -> got.size() >= 20, 15_000), "consumed %d of 20: %s", got.size(), got);
                Thread.sleep(300);
                check(got.equals(want), "consumed %s, expected %s", got, want);
            }

            // Two consumers with lock safety: every item consumed exactly once.
            String path2 = uniq("/java-queue2");
            List<String> got1 = Collections.synchronizedList(new ArrayList<>());
            List<String> got2 = Collections.synchronizedList(new ArrayList<>());
            try (DistributedQueue<String> q1 =
                            QueueBuilder.builder(c1, collector(got1), STRINGS, path2).lockPath(path2 + "-locks").buildQueue();
                    DistributedQueue<String> q2 =
                            QueueBuilder.builder(c2, collector(got2), STRINGS, path2).lockPath(path2 + "-locks").buildQueue();
                    DistributedQueue<String> prod =
                            QueueBuilder.builder(producer, null, STRINGS, path2).putInBackground(false).buildQueue()) {
                q1.start();
                q2.start();
                prod.start();
                for (int i = 0; i < 30; i++) {
                    prod.put("job-" + i);
                }
                check(waitFor(() -> got1.size() + got2.size() >= 30, 20_000), "consumed %d of 30",
                        got1.size() + got2.size());
                Thread.sleep(500);
                List<String> all = new ArrayList<>(got1);
                all.addAll(got2);
                check(all.size() == 30 && new HashSet<>(all).size() == 30, "items consumed more than once: %s + %s",
                        got1, got2);
            }
        }
    }
}
