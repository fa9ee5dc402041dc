// synod console (docs/console.md). Vanilla JavaScript, no dependency. Every value that comes
// from the server reaches the page as text (textContent, createTextNode), never as markup.
"use strict";

const POLL_MS = 1000;
const SPARK_POINTS = 120;

const $ = (id) => document.getElementById(id);

// An element with plain properties (className, title, type, …) and children: nodes or text.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "dataset") Object.assign(e.dataset, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function setText(id, v) {
  $(id).textContent = v === null || v === undefined ? "–" : String(v);
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function showError(id, msg) {
  const e = $(id);
  e.textContent = msg || "";
  e.hidden = !msg;
}

async function fetchOk(url, opts) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 3000);
  try {
    const r = await fetch(url, Object.assign({ signal: ctl.signal, cache: "no-store" }, opts || {}));
    return r;
  } finally {
    clearTimeout(timer);
  }
}

async function getJson(url) {
  const r = await fetchOk(url);
  let body = null;
  try {
    body = await r.json();
  } catch (e) {
    body = null;
  }
  return { status: r.status, ok: r.ok, body };
}

// ---- formatting -------------------------------------------------------------------------

function fmtRate(v) {
  if (v === null || !isFinite(v)) return "–";
  return v >= 100 ? v.toFixed(0) : v.toFixed(1);
}

function fmtMs(seconds) {
  if (seconds === null || !isFinite(seconds)) return "–";
  const ms = seconds * 1000;
  return (ms >= 100 ? ms.toFixed(0) : ms.toFixed(2)) + " ms";
}

function fmtBytes(n) {
  if (n === null || !isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function list(v) {
  return Array.isArray(v) && v.length ? v.join(", ") : "–";
}

function roleCell(role) {
  const known = role && role !== "not known here";
  return el("td", { className: known ? "role-" + String(role).replace(/[^a-z]/g, "") : "note" }, role || "–");
}

function machineName(m) {
  return { zookeeper: "ZooKeeper", kv: "SconeKV bucket", etcd: "etcd", register: "register" }[m] || m;
}

// ---- Prometheus text ---------------------------------------------------------------------

// name{labels} value lines into a Map from "name|k=v,…" (labels sorted) to a number.
function parseMetrics(text) {
  const out = new Map();
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)/;
  const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const l of text.split("\n")) {
    if (!l || l[0] === "#") continue;
    const m = line.exec(l);
    if (!m) continue;
    const labels = [];
    if (m[2]) {
      let x;
      label.lastIndex = 0;
      while ((x = label.exec(m[2])) !== null) labels.push(x[1] + "=" + x[2]);
    }
    labels.sort();
    out.set(m[1] + "|" + labels.join(","), Number(m[3]));
  }
  return out;
}

// The metrics the console reads, each by its names: the current one first, then the one it had
// before (so a console and a /metrics of different ages still agree).
const M = {
  delivered: ["synod_group_delivered_total", "synod_deliveries_total"],
  submitted: ["synod_group_submitted_total", "synod_submitted_total"],
  rejected: ["synod_group_rejected_total", "synod_rejected_total"],
  commitLatency: ["synod_group_commit_latency_seconds", "synod_commit_latency_seconds"],
  fsyncs: ["synod_wal_fsyncs_total"],
  fsyncLatency: ["synod_wal_fsync_duration_seconds", "synod_fsync_latency_seconds"],
  bytesIn: ["synod_peer_received_bytes_total", ["synod_transport", "kind=bytes_in"]],
  bytesOut: ["synod_peer_sent_bytes_total", ["synod_transport", "kind=bytes_out"]],
  logBytes: ["synod_wal_size_bytes", "synod_log_bytes"],
  logSegments: ["synod_wal_segments", "synod_log_segments"],
  zkConnections: ["synod_zk_connections"],
  zkSessions: ["synod_zk_sessions"],
  zkZnodes: ["synod_zk_znodes"],
  zkWatches: ["synod_zk_watches"],
  zkLatency: ["synod_zk_request_latency_seconds"],
  kvCommits: ["synod_kv_commits_total"],
};

// The value of the first of `names` that `map` has (with `labels`, plus the name's own), or
// null. A name is a string, or [name, label, …].
function metric(map, names, labels, suffix) {
  for (const n of names) {
    const [name, ...own] = Array.isArray(n) ? n : [n];
    const key = name + (suffix || "") + "|" + own.concat(labels || []).sort().join(",");
    if (map.has(key)) return map.get(key);
  }
  return null;
}

// The first of `names` (a histogram's) that `map` has a `_count` of.
function histogram(map, names, labels) {
  for (const n of names) if (metric(map, [n], labels, "_count") !== null) return n;
  return null;
}

// The upper bound of the bucket holding the 99th percentile of the observations between two
// samples of a histogram of group `g`.
function p99(cur, prev, name, g) {
  const prefix = name + "_bucket|";
  const rows = [];
  for (const [k, v] of cur) {
    if (!k.startsWith(prefix)) continue;
    const labels = k.slice(prefix.length).split(",");
    if (!labels.includes("group=" + g)) continue;
    const le = labels.find((l) => l.startsWith("le="));
    if (!le) continue;
    const before = prev.has(k) ? prev.get(k) : 0;
    rows.push([le === "le=+Inf" ? Infinity : Number(le.slice(3)), v - before]);
  }
  rows.sort((a, b) => a[0] - b[0]);
  if (!rows.length) return null;
  const total = rows[rows.length - 1][1];
  if (!(total > 0)) return null;
  for (const [le, n] of rows) if (n >= 0.99 * total) return le;
  return null;
}

// ---- the cluster, groups, buckets ---------------------------------------------------------

const state = { session: null, prev: null, spark: [] };

function renderStatus(st) {
  setText("cluster-id", st.cluster_id);
  setText("node-id", st.node_id);
  setText("version", st.version + (st.commit ? " (" + st.commit + ")" : ""));
  const groups = Array.isArray(st.groups) ? st.groups : [];
  const zk = groups.find((g) => g.id === 0) || {};
  const cfg = zk.config || {};
  setText("leader", zk.leader === null || zk.leader === undefined ? "none (electing)" : zk.leader);
  $("leader").className = zk.leader === null || zk.leader === undefined ? "role-electing" : "role-leader";
  $("leader").dataset.leader = zk.leader === null || zk.leader === undefined ? "" : String(zk.leader);
  setText("epoch", zk.epoch);
  setText("config-version", cfg.version);
  setText("config-pending", list(cfg.pending));
  setText("role", st.role);
  setText("protocol", zk.protocol || st.protocol);

  // Members: group 0's voters and learners (its members when the protocol keeps no configuration).
  const voters = cfg.voters || zk.members || [];
  const learners = cfg.learners || [];
  const leads = new Map();
  for (const g of groups) {
    if (g.leader === null || g.leader === undefined) continue;
    if (!leads.has(g.leader)) leads.set(g.leader, []);
    leads.get(g.leader).push(g.id);
  }
  const tbody = $("members").tBodies[0];
  clear(tbody);
  const rows = voters.map((n) => [n, "voter"]).concat(learners.map((n) => [n, "learner"]));
  rows.sort((a, b) => a[0] - b[0]);
  for (const [n, kind] of rows) {
    // This node knows its own role and the leader's, not whether the others are up.
    let role = "not known here";
    if (n === zk.leader) role = "leader";
    else if (n === st.node_id) role = zk.role;
    const tr = el("tr", { className: n === zk.leader ? "leader" : "", dataset: { node: String(n) } },
      el("td", {}, n === st.node_id ? n + " (this node)" : n),
      el("td", {}, kind),
      roleCell(role),
      el("td", {}, list(leads.get(n))));
    tbody.appendChild(tr);
  }

  const gbody = $("groups").tBodies[0];
  clear(gbody);
  for (const g of groups) {
    const c = g.config || {};
    gbody.appendChild(el("tr", { dataset: { group: String(g.id) } },
      el("td", { className: "num" }, g.id),
      el("td", {}, machineName(g.machine)),
      el("td", {}, g.protocol),
      roleCell(g.role),
      el("td", {}, g.leader === null || g.leader === undefined ? "none" : g.leader),
      el("td", { className: "num" }, g.epoch),
      el("td", { className: "num" }, c.version === undefined ? "–" : "v" + c.version),
      el("td", {}, list(c.voters || g.members)),
      el("td", {}, list(c.learners)),
      el("td", { className: "num" }, g.applied_slot),
      el("td", { className: "num" }, g.pending_requests)));
  }

  const buckets = groups.filter((g) => g.machine === "kv");
  $("kv-panel").hidden = buckets.length === 0;
  const bbody = $("buckets").tBodies[0];
  clear(bbody);
  for (const g of buckets) {
    bbody.appendChild(el("tr", { dataset: { group: String(g.id) } },
      el("td", { className: "num" }, g.id),
      el("td", { className: g.leader === null || g.leader === undefined ? "role-electing" : "" },
        g.leader === null || g.leader === undefined ? "none" : g.leader),
      el("td", {}, list(g.members)),
      roleCell(g.role),
      el("td", { className: "num" }, g.epoch),
      el("td", { className: "num" }, g.applied_slot)));
  }
  return groups;
}

// ---- rates ---------------------------------------------------------------------------------

function renderRates(groups, cur, t) {
  const prev = state.prev;
  state.prev = { map: cur, t };
  const tbody = $("rates").tBodies[0];
  clear(tbody);
  if (!prev || t <= prev.t) {
    tbody.appendChild(el("tr", {}, el("td", { colSpan: 6, className: "note" }, "measuring…")));
    return;
  }
  const dt = (t - prev.t) / 1000;
  const rate = (names, labels, suffix) => {
    const a = metric(cur, names, labels, suffix);
    const b = metric(prev.map, names, labels, suffix);
    return a === null || b === null ? null : Math.max(0, a - b) / dt;
  };
  // The mean of a histogram's observations since the last sample.
  const mean = (names, labels) => {
    const s = rate(names, labels, "_sum");
    const c = rate(names, labels, "_count");
    return s === null || !c ? null : s / c;
  };
  const latency = histogram(cur, M.commitLatency, ["group=0"]) || M.commitLatency[0];
  let commits = 0;
  for (const g of groups) {
    const l = ["group=" + g.id];
    const c = rate(M.delivered, l);
    commits += c || 0;
    const q = p99(cur, prev.map, latency, g.id);
    tbody.appendChild(el("tr", { dataset: { group: String(g.id) } },
      el("td", {}, g.id + " " + machineName(g.machine)),
      el("td", { className: "num" }, fmtRate(c)),
      el("td", { className: "num" }, fmtRate(rate(M.submitted, l))),
      el("td", { className: "num" }, fmtRate(rate(M.rejected, l))),
      el("td", { className: "num" }, fmtMs(mean(M.commitLatency, l))),
      el("td", { className: "num" }, q === null ? "–" : q === Infinity ? "> largest bucket" : "≤ " + fmtMs(q))));
  }
  setText("fsync-rate", fmtRate(rate(M.fsyncs)));
  setText("fsync-latency", fmtMs(mean(M.fsyncLatency)));
  setText("peer-bytes", fmtBytes(rate(M.bytesIn)) + "/s in, " + fmtBytes(rate(M.bytesOut)) + "/s out");
  setText("log-bytes", fmtBytes(metric(cur, M.logBytes)) + " in " +
    (metric(cur, M.logSegments) ?? "–") + " segments");
  const count = (names) => metric(cur, names) ?? "–";
  setText("zk-clients", count(M.zkConnections) + " connections, " + count(M.zkSessions) +
    " sessions, " + count(M.zkZnodes) + " znodes, " + count(M.zkWatches) + " watches");
  setText("zk-requests", fmtRate(rate(M.zkLatency, [], "_count")) + "/s, mean " + fmtMs(mean(M.zkLatency)));
  setText("kv-commits", fmtRate(rate(M.kvCommits)));
  state.spark.push(commits);
  if (state.spark.length > SPARK_POINTS) state.spark.shift();
  drawSpark();
}

function drawSpark() {
  const c = $("spark");
  const ctx = c.getContext && c.getContext("2d");
  if (!ctx) return;
  const w = c.width;
  const h = c.height;
  ctx.clearRect(0, 0, w, h);
  const pts = state.spark;
  const max = Math.max(1, ...pts);
  ctx.strokeStyle = "#2458a6";
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  pts.forEach((v, i) => {
    const x = (i / (SPARK_POINTS - 1)) * (w - 2) + 1;
    const y = h - 4 - (v / max) * (h - 18);
    if (i === 0) ctx.moveTo(x, y);
    else ctx.lineTo(x, y);
  });
  ctx.stroke();
  ctx.fillStyle = "#66707a";
  ctx.font = "11px sans-serif";
  ctx.fillText("max " + fmtRate(max) + "/s", 4, 12);
}

// ---- polling -------------------------------------------------------------------------------

async function poll() {
  try {
    const [s, m] = await Promise.all([fetchOk("/v1/status"), fetchOk("/metrics")]);
    if (!s.ok) throw new Error("/v1/status answered " + s.status);
    const st = await s.json();
    const groups = renderStatus(st);
    if (m.ok) renderRates(groups, parseMetrics(await m.text()), Date.now());
    showError("error", "");
    setText("updated", "updated " + new Date().toLocaleTimeString());
    document.body.dataset.polled = String(Number(document.body.dataset.polled || 0) + 1);
  } catch (e) {
    showError("error", "This node does not answer (" + (e && e.message ? e.message : e) +
      "); the figures below are from its last answer.");
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

// ---- the ZooKeeper tree --------------------------------------------------------------------

const zk = { path: "/", after: null };

function childPath(parent, name) {
  return parent === "/" ? "/" + name : parent + "/" + name;
}

function crumbs(path) {
  const nav = $("zk-crumbs");
  clear(nav);
  nav.appendChild(el("button", { type: "button", onclick: () => openZnode("/") }, "/"));
  let p = "";
  const parts = path.split("/").filter((x) => x);
  parts.forEach((name, i) => {
    p = p + "/" + name;
    const target = p;
    nav.appendChild(el("button", { type: "button", onclick: () => openZnode(target) }, name));
    if (i < parts.length - 1) nav.appendChild(document.createTextNode("/"));
  });
}

async function loadChildren(path, after) {
  const q = "/v1/zk/children?path=" + encodeURIComponent(path) +
    (after ? "&after=" + encodeURIComponent(after) : "");
  const r = await getJson(q);
  const ul = $("zk-children");
  if (!after) clear(ul);
  if (!r.ok) {
    $("zk-more").hidden = true;
    setText("zk-count", "");
    ul.appendChild(el("li", { className: "note" }, (r.body && r.body.error) || "cannot list (" + r.status + ")"));
    return;
  }
  for (const name of r.body.children) {
    const target = childPath(path, name);
    ul.appendChild(el("li", {}, el("button", { type: "button", onclick: () => openZnode(target) }, name)));
  }
  const names = r.body.children;
  zk.after = names.length ? names[names.length - 1] : null;
  $("zk-more").hidden = !r.body.truncated;
  setText("zk-count", "(" + r.body.total + ")");
}

function statRows(stat) {
  const tbody = $("zk-stat").tBodies[0];
  clear(tbody);
  const when = (ms) => (ms ? new Date(ms).toISOString() + " (" + ms + ")" : "0");
  const rows = [
    ["czxid", stat.czxid], ["mzxid", stat.mzxid], ["pzxid", stat.pzxid],
    ["ctime", when(stat.ctime)], ["mtime", when(stat.mtime)],
    ["version", stat.version], ["cversion", stat.cversion], ["aversion", stat.aversion],
    ["ephemeralOwner", stat.ephemeral_owner], ["dataLength", stat.data_length],
    ["numChildren", stat.num_children],
  ];
  for (const [k, v] of rows) tbody.appendChild(el("tr", {}, el("th", {}, k), el("td", {}, v)));
}

async function openZnode(path) {
  zk.path = path;
  $("zk-path").value = path;
  crumbs(path);
  showError("zk-error", "");
  if (location.hash !== "#zk=" + encodeURIComponent(path)) {
    history.replaceState(null, "", "#zk=" + encodeURIComponent(path));
  }
  let r;
  try {
    r = await getJson("/v1/zk/node?path=" + encodeURIComponent(path));
  } catch (e) {
    showError("zk-error", "This node does not answer: " + e);
    return;
  }
  if (zk.path !== path) return; // another znode was opened meanwhile
  const pre = $("zk-data");
  if (!r.ok) {
    showError("zk-error", (r.body && r.body.error) || "error " + r.status);
    pre.textContent = "";
    setText("zk-data-note", "");
    clear($("zk-stat").tBodies[0]);
    clear($("zk-acl").tBodies[0]);
    clear($("zk-children"));
    return;
  }
  const n = r.body;
  const d = n.data;
  if (!n.readable) {
    pre.textContent = "";
    setText("zk-data-note", "(not readable: the znode's ACL does not let anonymous clients read; the admin certificate reads everything)");
  } else if (d.null) {
    pre.textContent = "";
    setText("zk-data-note", "(null)");
  } else {
    pre.textContent = d.text !== undefined ? d.text : d.hex;
    const enc = d.text !== undefined ? "text" : "hexadecimal";
    setText("zk-data-note", "(" + enc + ", " + (d.shown < d.length ? "first " + d.shown + " of " : "") +
      d.length + " bytes)");
  }
  statRows(Object.assign({}, n.stat));
  const acl = $("zk-acl").tBodies[0];
  clear(acl);
  for (const a of n.acl) acl.appendChild(el("tr", {}, el("td", {}, a.scheme + ":" + a.id), el("td", {}, a.perms)));
  if (n.kind !== "persistent") {
    acl.appendChild(el("tr", {}, el("td", { className: "note" }, "kind"),
      el("td", {}, n.kind + (n.ttl_ms ? " (ttl " + n.ttl_ms + " ms)" : ""))));
  }
  if (state.session && state.session.writes && d && d.text !== undefined && d.shown === d.length) {
    $("zk-new-data").value = d.text;
  }
  await loadChildren(path, null);
}

// Writes go through the key-value API (`PUT`/`DELETE /v1/kv/<path>`), which asks for the admin
// certificate itself: the console offers them only when the session says the caller has it.
async function write(method) {
  const path = zk.path;
  if (path === "/") return;
  const key = path.split("/").filter((x) => x).map(encodeURIComponent).join("/");
  const body = method === "PUT" ? $("zk-new-data").value : undefined;
  let msg;
  try {
    const r = await fetchOk("/v1/kv/" + key, { method, body });
    msg = r.ok ? method + " done" : method + " refused: " + r.status + " " + (await r.text());
  } catch (e) {
    msg = method + " failed: " + e;
  }
  setText("zk-write-result", msg);
  if (method === "DELETE") {
    const parent = path.slice(0, path.lastIndexOf("/")) || "/";
    openZnode(parent);
  } else {
    openZnode(path);
  }
}

// ---- start ---------------------------------------------------------------------------------

async function start() {
  try {
    const s = await getJson("/v1/console/session");
    state.session = s.body;
  } catch (e) {
    state.session = null;
  }
  const admin = state.session && state.session.writes;
  const badge = $("access");
  badge.textContent = admin ? "admin (writes allowed)" : "read-only";
  badge.title = admin
    ? "This connection presented the admin client certificate."
    : "Writes need the admin client certificate (HTTPS admin port, [tls] admin_subjects).";
  badge.className = admin ? "badge admin" : "badge";
  $("zk-write").hidden = !admin;
  $("zk-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const p = $("zk-path").value.trim() || "/";
    openZnode(p.length > 1 && p.endsWith("/") ? p.slice(0, -1) : p);
  });
  $("zk-refresh").addEventListener("click", () => openZnode(zk.path));
  $("zk-more").addEventListener("click", () => loadChildren(zk.path, zk.after));
  $("zk-write").addEventListener("submit", (e) => {
    e.preventDefault();
    write("PUT");
  });
  $("zk-delete").addEventListener("click", () => write("DELETE"));
  let first = "/";
  if (location.hash.startsWith("#zk=")) {
    try {
      first = decodeURIComponent(location.hash.slice(4)) || "/";
    } catch (e) {
      first = "/";
    }
  }
  openZnode(first);
  poll();
}

document.addEventListener("DOMContentLoaded", start);
