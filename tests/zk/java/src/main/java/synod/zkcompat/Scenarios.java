package synod.zkcompat;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;

/**
 * Runs one named scenario of a Java ZooKeeper client against a connect string:
 *
 * <pre>java -cp target/classes:target/lib/* synod.zkcompat.Scenarios SCENARIO HOST:PORT,...</pre>
 *
 * Prints "OK scenario" and exits 0, or prints "FAIL scenario: reason" with the stack trace and
 * exits 1. A scenario that hangs is stopped by a watchdog (thread dump, exit 2).
 */
public final class Scenarios {
    interface Scenario {
        void run(String hosts) throws Exception;
    }

    static final Map<String, Scenario> ALL = new LinkedHashMap<>();

    static {
        ALL.put("leader-latch", CuratorScenarios::leaderLatch);
        ALL.put("leader-selector", CuratorScenarios::leaderSelector);
        ALL.put("mutex", CuratorScenarios::mutex);
        ALL.put("semaphore", CuratorScenarios::semaphore);
        ALL.put("barrier", CuratorScenarios::barrier);
        ALL.put("path-children-cache", CuratorScenarios::pathChildrenCache);
        ALL.put("curator-cache", CuratorScenarios::curatorCache);
        ALL.put("shared-count", CuratorScenarios::sharedCount);
        ALL.put("distributed-queue", CuratorScenarios::distributedQueue);
        ALL.put("zk-create-modes", ClientScenarios::createModes);
        ALL.put("zk-data-and-watches", ClientScenarios::dataAndWatches);
        ALL.put("zk-multi", ClientScenarios::multi);
        ALL.put("zk-acl-digest", ClientScenarios::aclDigest);
        ALL.put("zk-acl-auth-expansion", ClientScenarios::aclAuthExpansion);
        ALL.put("zk-ephemerals-and-counts", ClientScenarios::ephemeralsAndCounts);
        ALL.put("zk-persistent-watches", ClientScenarios::persistentWatches);
        ALL.put("zk-sync-and-whoami", ClientScenarios::syncAndWhoAmI);
        ALL.put("zk-async-pipeline", ClientScenarios::asyncPipeline);
        ALL.put("zk-session-moves", ClientScenarios::sessionMoves);
        ALL.put("zk-jaas-client-section", ClientScenarios::jaasClientSection);
        ALL.put("zk-jaas-without-client-section", ClientScenarios::jaasWithoutClientSection);
    }

    public static void main(String[] args) {
        if (args.length == 1 && args[0].equals("list")) {
            ALL.keySet().forEach(System.out::println);
            System.exit(0);
        }
        if (args.length != 2 || !ALL.containsKey(args[0])) {
            System.err.println("usage: Scenarios SCENARIO HOST:PORT[,HOST:PORT...]; scenarios: " + ALL.keySet());
            System.exit(64);
        }
        String name = args[0];
        long limit = Long.getLong("scenario.timeout.ms", 45_000);
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limit);
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("FAIL " + name + ": timed out after " + limit + " ms; threads:");
            for (ThreadInfo t : ManagementFactory.getThreadMXBean().dumpAllThreads(false, false)) {
                System.out.print(t);
            }
            System.out.flush();
            Runtime.getRuntime().halt(2);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        long start = System.nanoTime();
        try {
            ALL.get(name).run(args[1]);
        } catch (Throwable t) {
            System.out.println("FAIL " + name + ": " + t);
            t.printStackTrace(System.out);
            System.out.flush();
            Runtime.getRuntime().halt(1);
        }
        System.out.printf("OK %s (%d ms)%n", name, (System.nanoTime() - start) / 1_000_000);
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    // ------------------------------------------------------------------ helpers

    interface Cond {
        boolean get() throws Exception;
    }

    static void check(boolean cond, String fmt, Object... args) {
        if (!cond) {
            throw new AssertionError(String.format(fmt, args));
        }
    }

    static boolean waitFor(Cond c, long ms) throws Exception {
        long deadline = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < deadline) {
            if (c.get()) {
                return true;
            }
            Thread.sleep(20);
        }
        return c.get();
    }

    static String uniq(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String s(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static String[] split(String hosts) {
        String[] h = hosts.split(",");
        check(h.length >= 3, "the scenario needs three servers, got %s", hosts);
        return h;
    }

    static CuratorFramework curator(String hosts) throws InterruptedException {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .sessionTimeoutMs(10_000)
                .connectionTimeoutMs(10_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10, 1000))
                .build();
        c.start();
        check(c.blockUntilConnected(20, TimeUnit.SECONDS), "Curator did not connect to %s", hosts);
        return c;
    }

    /** Records every event given to a watcher. */
    static final class Events implements Watcher {
        final BlockingQueue<WatchedEvent> q = new LinkedBlockingQueue<>();
        final String name;

        Events(String name) {
            this.name = name;
        }

        @Override
        public void process(WatchedEvent e) {
            q.add(e);
        }

        WatchedEvent next(long ms) throws InterruptedException {
            return q.poll(ms, TimeUnit.MILLISECONDS);
        }

        /** The next event that is not a connection-state change (type None). */
        WatchedEvent expect(Event.EventType type, String path) throws InterruptedException {
            long deadline = System.currentTimeMillis() + 10_000;
            while (true) {
                WatchedEvent e = q.poll(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
                check(e != null, "watcher %s: no %s event for %s within 10 s", name, type, path);
                if (e.getType() == Event.EventType.None && type != Event.EventType.None) {
                    continue;
                }
                check(e.getType() == type && path.equals(e.getPath()),
                        "watcher %s: expected %s %s, got %s %s (state %s)", name, type, path, e.getType(), e.getPath(),
                        e.getState());
                return e;
            }
        }

        /** No node event arrives within ms. */
        void expectNone(long ms) throws InterruptedException {
            long deadline = System.currentTimeMillis() + ms;
            while (true) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) {
                    return;
                }
                WatchedEvent e = q.poll(left, TimeUnit.MILLISECONDS);
                if (e == null) {
                    return;
                }
                check(e.getType() == Event.EventType.None, "watcher %s: unexpected event %s %s", name, e.getType(),
                        e.getPath());
            }
        }

        /** Waits for a connection state (event type None). */
        void expectState(Event.KeeperState state, long ms) throws InterruptedException {
            long deadline = System.currentTimeMillis() + ms;
            while (true) {
                WatchedEvent e = q.poll(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
                check(e != null, "watcher %s: no %s state within %d ms", name, state, ms);
                if (e.getType() == Event.EventType.None && e.getState() == state) {
                    return;
                }
            }
        }
    }

    /** A plain ZooKeeper client, connected (SyncConnected seen) before it is returned. */
    static ZooKeeper zk(String hosts) throws Exception {
        return zk(hosts, new Events("default"));
    }

    static ZooKeeper zk(String hosts, Watcher defaultWatcher) throws Exception {
        CountDownLatch connected = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(hosts, 10_000, e -> {
            if (e.getType() == Watcher.Event.EventType.None && e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
            defaultWatcher.process(e);
        });
        if (!connected.await(20, TimeUnit.SECONDS)) {
            String state = zk.toString();
            zk.close();
            throw new AssertionError("the ZooKeeper client did not connect to " + hosts + " within 20 s: " + state);
        }
        return zk;
    }
}
