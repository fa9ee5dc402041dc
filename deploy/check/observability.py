#!/usr/bin/env python3
"""Checks the Grafana dashboard and the Prometheus alert rules against synod's real metrics.

    observability.py DASHBOARD ALERTS METRICS OUT_RULES

DASHBOARD  deploy/grafana/synod.json
ALERTS     deploy/prometheus/alerts.yaml
METRICS    the text of a running node's /metrics (scripts/check-deploy.sh scrapes one)
OUT_RULES  written here: every dashboard query as a recording rule, for `promtool check rules`
           (which parses the PromQL); Grafana's variables are replaced by plain values first.

Fails (exit 1, one line per problem) on: a dashboard that is not JSON or lacks what Grafana
needs to import it (title, uid, the datasource variable, panels with ids, positions and
queries), two panels in one place, a query on a data source other than the variable, any
synod_* series named by a query or a rule that the node does not export (a `__name__=~"..."`
matcher must match at least one exported name), and a literal label value (group="0") the
node's samples of that series never carry.
"""
import json
import re
import sys

import yaml

GRAFANA_VARS = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$job": "synod",
    "$instance": ".*",
    "$group": ".*",
    "${datasource}": "prometheus",
}
METRIC = re.compile(r"\bsynod_[a-z0-9_]+\b")
# A selector by name pattern, e.g. {__name__=~"synod_protocol_.+"} (every core reading).
NAME_REGEX = re.compile(r'__name__\s*(=~|!~)\s*"([^"]*)"')


SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def exported_names(text):
    """Series names of an exposition: its samples, and those its # TYPE lines declare (a
    labelled family shows no sample until its first child, e.g. a counter never incremented)."""
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) ([a-z]+)", line)
        if m:
            names.update(m.group(1) + s for s in SUFFIXES.get(m.group(2), ("",)))
        elif line and not line.startswith("#"):
            m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            if m:
                names.add(m.group(0))
    return names


def exported_labels(text):
    """{series name: {label: set of values}} of the samples in an exposition."""
    seen = {}
    for line in text.splitlines():
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", line)
        if m and not line.startswith("#"):
            labels = seen.setdefault(m.group(1), {})
            for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', m.group(2)):
                labels.setdefault(k, set()).add(v)
    return seen


SELECTOR = re.compile(r"\b(synod_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|=)\s*"([^"]*)"')


def check_label_values(where, expr, labels, problems):
    """A matcher on a label the node exports with literal values (group="0",
    kind=~"a|b") must name values the node has: a renamed value would match nothing."""
    for name, body in SELECTOR.findall(expr):
        for label, op, value in MATCHER.findall(body):
            have = labels.get(name, {}).get(label)
            if not have:
                continue  # no sample of this series with this label yet: nothing to compare
            wanted = value.split("|") if op == "=~" else [value]
            for w in wanted:
                if re.fullmatch(r"[A-Za-z0-9_]+", w) and w not in have:
                    problems.append(f"{where}: {name}{{{label}=\"{w}\"}}: the node's {label} values are {sorted(have)}")


def check_dashboard(d, problems):
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in d:
            problems.append(f"dashboard: no {key!r}")
    if problems:
        return []
    variables = {v.get("name"): v for v in d["templating"].get("list", [])}
    if variables.get("datasource", {}).get("type") != "datasource":
        problems.append("dashboard: no 'datasource' variable of type datasource")
    exprs, ids, cells = [], set(), {}
    for p in d["panels"]:
        title = p.get("title", "?")
        pid = p.get("id")
        if not isinstance(pid, int) or pid in ids:
            problems.append(f"panel {title!r}: missing or repeated id {pid!r}")
        ids.add(pid)
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in ("h", "w", "x", "y")):
            problems.append(f"panel {title!r}: gridPos needs integer h, w, x, y")
            continue
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            problems.append(f"panel {title!r}: wider than the 24-column grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"panel {title!r} overlaps panel {cells[(x, y)]!r}")
                    break
                cells[(x, y)] = title
            else:
                continue
            break
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"panel {title!r}: data source is not ${{datasource}}")
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"panel {title!r}: no queries")
        for t in targets:
            e = t.get("expr", "").strip()
            if not e:
                problems.append(f"panel {title!r}: an empty query")
                continue
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"panel {title!r}: a query's data source is not ${{datasource}}")
            exprs.append((f"panel {title!r}", e))
    for name, v in variables.items():
        q = v.get("query")
        if isinstance(q, dict) and q.get("query"):
            exprs.append((f"variable {name!r}", q["query"]))
    return exprs


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    dash_path, alerts_path, metrics_path, out_path = sys.argv[1:]
    problems = []
    try:
        with open(dash_path) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{dash_path}: not a JSON dashboard: {e}")
        return 1
    exprs = check_dashboard(dash, problems)
    with open(alerts_path) as f:
        rules = yaml.safe_load(f)
    for g in rules.get("groups", []):
        for r in g.get("rules", []):
            exprs.append((f"alert {r.get('alert') or r.get('record')!r}", str(r.get("expr", ""))))
    with open(metrics_path) as f:
        text = f.read()
    exported = exported_names(text)
    labels = exported_labels(text)
    if not any(n.startswith("synod_") for n in exported):
        problems.append(f"{metrics_path}: no synod_ metric at all: not a synod node's /metrics")
    for where, e in exprs:
        for op, rx in NAME_REGEX.findall(e):
            if op == "=~" and not any(re.fullmatch(rx, n) for n in exported):
                problems.append(f"{where}: no exported series matches __name__=~{rx!r}")
        e = NAME_REGEX.sub("", e)
        for name in sorted(set(METRIC.findall(e))):
            if name not in exported:
                problems.append(f"{where}: {name} is not a metric synod exports")
        check_label_values(where, e, labels, problems)
    # Every dashboard query as a recording rule (label_values() is Grafana's, not PromQL).
    record = []
    for i, (where, e) in enumerate(x for x in exprs if x[0].startswith("panel")):
        for var, value in GRAFANA_VARS.items():
            e = e.replace(var, value)
        record.append({"record": f"dashboard:query_{i}", "expr": e})
    with open(out_path, "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": record}]}, f, sort_keys=False)
    for p in problems:
        print(p)
    print(f"{dash_path}: {len(dash.get('panels', []))} panels; {len(exprs)} queries and rules "
          f"checked against {len(exported)} exported series names; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
