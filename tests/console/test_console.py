"""The console in Chromium: the cluster (three members, a leader) followed through the leader's
death, the groups and SconeKV buckets, live rates, and a znode a ZooKeeper client made, browsed
and shown as text (never as markup). A screenshot is left in target/console/console.png."""

import os
import threading
import time

from kazoo.client import KazooClient
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import OUT


def wait_for(driver, what, cond, timeout=20):
    """Poll `cond(driver)` (exceptions of a page being redrawn count as not yet) until truthy."""

    def check(d):
        try:
            return cond(d)
        except StaleElementReferenceException:
            return False

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(check)
    except Exception as e:
        raise AssertionError("%s: not within %ds (%s)" % (what, timeout, e))


def text(driver, css):
    return driver.find_element(By.CSS_SELECTOR, css).text


def rows(driver, css):
    return driver.find_elements(By.CSS_SELECTOR, css + " tbody tr")


def leader_shown(driver):
    return driver.find_element(By.ID, "leader").get_attribute("data-leader")


def commits(row):
    cell = row.find_elements(By.CSS_SELECTOR, "td")[1].text
    try:
        return float(cell)
    except ValueError:
        return 0.0


def screenshot(driver, name):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    driver.save_screenshot(path)
    print("\nconsole screenshot: %s" % path)
    return path


def test_console_follows_the_cluster_and_browses_the_tree(cluster, browser):
    leader = cluster.wait_leader()
    # The page is served by a follower, which outlives the leader.
    page_node = min(i for i in cluster.alive() if i != leader)

    zk = KazooClient(hosts=cluster.hosts(), timeout=10)
    zk.start(timeout=30)
    try:
        zk.create("/console-demo", b"hello from kazoo")
        zk.create("/console-demo/markup", b"<b>not bold</b><script>window.pwned=1</script>")
        for i in range(3):
            zk.create("/console-demo/child-%d" % i, b"")

        started = time.time()
        browser.get("http://127.0.0.1:%d/" % cluster.admin_port(page_node))
        assert "/console/" in browser.current_url, browser.current_url
        wait_for(browser, "three members", lambda d: len(rows(d, "#members")) == 3)
        wait_for(browser, "the leader, node %d" % leader, lambda d: leader_shown(d) == str(leader))
        members = [r.get_attribute("data-node") for r in rows(browser, "#members")]
        assert members == ["1", "2", "3"], members
        assert "leader" in text(browser, "#members tr.leader"), text(browser, "#members")
        assert text(browser, "#access") == "read-only"
        assert not browser.find_element(By.ID, "zk-write").is_displayed()
        # Groups: ZooKeeper's and the three SconeKV buckets, each with its master.
        wait_for(browser, "group 0 and the buckets", lambda d: len(rows(d, "#groups")) >= 4)
        wait_for(browser, "three buckets with masters",
                 lambda d: len(rows(d, "#buckets")) == 3
                 and all(r.find_elements(By.CSS_SELECTOR, "td")[1].text.isdigit()
                         for r in rows(d, "#buckets")))
        print("\nconsole: cluster shown %.1fs after loading" % (time.time() - started))

        # The leader dies; the page follows the new one.
        cluster.kill(leader)
        killed = time.time()
        wait_for(browser, "a new leader after node %d's death" % leader,
                 lambda d: leader_shown(d) not in ("", str(leader)), timeout=30)
        new = int(leader_shown(browser))
        print("console: leader %d -> %d shown %.1fs after the kill" % (leader, new, time.time() - killed))
        assert new == cluster.wait_leader(other_than=leader)
        assert text(browser, "#error") == ""

        # Writes while the rates are watched: group 0 shows commits per second.
        done = threading.Event()

        def load():
            while not done.is_set():
                try:
                    zk.set("/console-demo", b"hello from kazoo")
                except Exception:  # reconnecting after the kill
                    time.sleep(0.1)
                time.sleep(0.005)

        writer = threading.Thread(target=load, daemon=True)
        writer.start()
        try:
            wait_for(browser, "commits per second of group 0",
                     lambda d: any(r.get_attribute("data-group") == "0" and commits(r) > 0
                                   for r in rows(d, "#rates")), timeout=20)
            print("console: rates\n" + text(browser, "#rates"))
        finally:
            done.set()
            writer.join()

        # The znode browser: from the root to the client's znode, to its children.
        wait_for(browser, "the root's children",
                 lambda d: "console-demo" in [b.text for b in d.find_elements(By.CSS_SELECTOR, "#zk-children button")])
        [b for b in browser.find_elements(By.CSS_SELECTOR, "#zk-children button") if b.text == "console-demo"][0].click()
        wait_for(browser, "the znode's data", lambda d: text(d, "#zk-data") == "hello from kazoo")
        wait_for(browser, "its four children", lambda d: len(d.find_elements(By.CSS_SELECTOR, "#zk-children li")) == 4)
        assert "dataLength\n16" in text(browser, "#zk-stat").replace(" ", "\n"), text(browser, "#zk-stat")
        assert "world:anyone" in text(browser, "#zk-acl")
        [b for b in browser.find_elements(By.CSS_SELECTOR, "#zk-children button") if b.text == "markup"][0].click()
        wait_for(browser, "data shown as text",
                 lambda d: text(d, "#zk-data") == "<b>not bold</b><script>window.pwned=1</script>")
        assert browser.find_elements(By.CSS_SELECTOR, "#zk-data *") == []
        assert browser.execute_script("return window.pwned === undefined")
        # Typing a path works too, and the address keeps it.
        box = browser.find_element(By.ID, "zk-path")
        box.clear()
        box.send_keys("/console-demo\n")
        wait_for(browser, "the typed znode", lambda d: text(d, "#zk-data") == "hello from kazoo")
        assert browser.current_url.endswith("#zk=%2Fconsole-demo"), browser.current_url

        screenshot(browser, "console.png")
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == [], errors
    finally:
        zk.stop()
        zk.close()
