#!/usr/bin/python3
"""Checks deploy/monitoring against the repository and a live cuckood.

  scripts/check-monitoring.py            check everything (below); exit 1 on a problem
  scripts/check-monitoring.py --write    write cuckood-prometheusrule.yaml from
                                         cuckood-rules.yaml, then check
  scripts/check-monitoring.py --static   every check but the live servers' /metrics

Run by scripts/container-test.sh (its deploy/monitoring section), after
promtool has checked and unit-tested the rules. It checks:
  1. cuckood-prometheusrule.yaml is exactly what --write makes of
     cuckood-rules.yaml (the rules' groups as the PrometheusRule's spec), so
     the two never drift;
  2. every alert has a severity (critical or warning), a summary, a
     description and a runbook_url naming a section of docs/RUNBOOK.md, and
     every section there is an alert's; cuckood-rules.test.yaml tests each
     alert both firing and silent;
  3. the PodMonitor and the ServiceMonitor select the pods and Services of
     deploy/k8s and deploy/k8s/cluster by their labels, and name their
     admin port;
  4. cuckood-dashboard.json is valid JSON, ready for provisioning: a
     Prometheus datasource variable, which every panel and query uses, and
     no datasource uid written in; every query parses as PromQL (promtool,
     with Grafana's variables replaced);
  5. every metric the rules and the dashboard's queries use is one a live
     cuckood's /metrics has (with samples), `up` (Prometheus' own) aside:
     the release build's cuckood (build/release, as the other tests find
     it) started twice, on throwaway directories and loopback ports:
       - a single node with TLS (a throwaway certificate made with the
         openssl CLI), an access file and the Redis port, exercised with
         build/release/client/cuckooctl (a fixed and a growing filter,
         inserts, lookups, a call without a token) and over the Redis port
         (a wrong and a right AUTH, CF.ADD, CF.EXISTS), so that the labelled
         series, the auth failures and the certificate's expiry appear;
       - a cluster replica (--nats) on a throwaway nats-server (Debian's
         nats-server, JetStream on), which has the cuckood_cluster_* metrics
         a single node does not.
YAML is read with PyYAML (Debian's python3-yaml).
"""
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import yaml
except ImportError:
    sys.exit("check-monitoring: PyYAML is needed (Debian's python3-yaml; scripts/install-deps.sh --test)")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MON = os.path.join(ROOT, "deploy", "monitoring")
RULES = os.path.join(MON, "cuckood-rules.yaml")
RULE_TESTS = os.path.join(MON, "cuckood-rules.test.yaml")
PROMRULE = os.path.join(MON, "cuckood-prometheusrule.yaml")
PODMON = os.path.join(MON, "cuckood-podmonitor.yaml")
SVCMON = os.path.join(MON, "cuckood-servicemonitor.yaml")
DASHBOARD = os.path.join(MON, "cuckood-dashboard.json")
RUNBOOK = os.path.join(ROOT, "docs", "RUNBOOK.md")
CUCKOOD = os.path.join(ROOT, "build", "release", "server", "cuckood")
CUCKOOCTL = os.path.join(ROOT, "build", "release", "client", "cuckooctl")
# Prometheus' own series, not cuckood's.
PROMETHEUS_SERIES = {"up"}

problems = []


def problem(msg):
    problems.append(msg)
    print("check-monitoring: PROBLEM: " + msg)


def rel(path):
    return os.path.relpath(path, ROOT)


def load_yaml(path):
    with open(path) as f:
        return list(yaml.safe_load_all(f))


# ------------------------------------------------------- 1. PrometheusRule

PROMRULE_HEADER = """\
# GENERATED from cuckood-rules.yaml by scripts/check-monitoring.py --write:
# do not edit; edit cuckood-rules.yaml and run that (CI fails when the two
# differ). The same alerting rules as a Prometheus Operator PrometheusRule:
#   kubectl apply -n NAMESPACE -f deploy/monitoring/cuckood-prometheusrule.yaml
# The Prometheus must select it (ruleSelector, ruleNamespaceSelector;
# kube-prometheus-stack: the label release: <its release name>, or
# ruleSelectorNilUsesHelmValues=false).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: cuckood
  labels:
    app.kubernetes.io/name: cuckood
    app.kubernetes.io/part-of: cuckood
spec:
"""


def prometheusrule_text():
    """The rules file below its leading comment, indented under spec:."""
    with open(RULES) as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("#") or not lines[i].strip()):
        i += 1
    if i == len(lines) or not lines[i].startswith("groups:"):
        sys.exit("check-monitoring: %s: expected `groups:` after the leading comment" % rel(RULES))
    body = "".join(("  " + l if l.strip() else "") + "\n" for l in lines[i:])
    return PROMRULE_HEADER + body


def check_prometheusrule():
    want = prometheusrule_text()
    have = open(PROMRULE).read() if os.path.exists(PROMRULE) else None
    if have != want:
        problem("%s differs from what `scripts/check-monitoring.py --write` makes of %s: run it"
                % (rel(PROMRULE), rel(RULES)))
        return
    (doc,) = load_yaml(PROMRULE)
    (rules,) = load_yaml(RULES)
    if doc["spec"] != rules:
        problem("%s: spec is not the groups of %s" % (rel(PROMRULE), rel(RULES)))
    print("%s: the groups of %s (%d groups), as generated"
          % (rel(PROMRULE), rel(RULES), len(rules["groups"])))


# ------------------------------------------------------- 2. alerts, runbook

def github_anchor(heading):
    a = heading.strip().lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")


def check_alerts():
    (rules,) = load_yaml(RULES)
    with open(RUNBOOK) as f:
        sections = {github_anchor(m.group(1)): m.group(1)
                    for m in re.finditer(r"^## (.+)$", f.read(), re.M)}
    alerts = []
    for group in rules["groups"]:
        for r in group["rules"]:
            if "alert" not in r:
                continue
            name = r["alert"]
            alerts.append(name)
            labels, ann = r.get("labels", {}), r.get("annotations", {})
            if labels.get("severity") not in ("critical", "warning"):
                problem("alert %s: severity %r, not critical or warning" % (name, labels.get("severity")))
            for key in ("summary", "description", "runbook_url"):
                if not ann.get(key):
                    problem("alert %s: no %s annotation" % (name, key))
            url = ann.get("runbook_url", "")
            m = re.fullmatch(r"docs/RUNBOOK\.md#([\w-]+)", url)
            if not m or m.group(1) not in sections:
                problem("alert %s: runbook_url %r names no section of docs/RUNBOOK.md" % (name, url))
            elif sections[m.group(1)] != name:
                problem("alert %s: runbook_url %r is the section of %s" % (name, url, sections[m.group(1)]))
    orphans = set(sections.values()) - set(alerts)
    for s in sorted(orphans):
        problem("docs/RUNBOOK.md: section %r is no alert's" % s)
    # Each alert tested firing and silent.
    (tests,) = load_yaml(RULE_TESTS)
    fired, silent = set(), set()
    for t in tests["tests"]:
        for a in t.get("alert_rule_test", []):
            (fired if a.get("exp_alerts") else silent).add(a["alertname"])
    for name in sorted(set(alerts)):
        if name not in fired:
            problem("%s: no test where %s fires" % (rel(RULE_TESTS), name))
        if name not in silent:
            problem("%s: no test where %s stays silent" % (rel(RULE_TESTS), name))
    print("%s: %d alerting rules (%d alerts), each with severity, summary, description and a "
          "runbook section; each tested firing and silent" % (rel(RULES), len(alerts), len(set(alerts))))
    return rules


# ------------------------------------------------------- 3. monitors

def check_monitors():
    deployments = {
        "deploy/k8s": ["deploy/k8s/statefulset.yaml", "deploy/k8s/service.yaml",
                       "deploy/k8s/service-headless.yaml"],
        "deploy/k8s/cluster": ["deploy/k8s/cluster/cuckood-statefulset.yaml",
                               "deploy/k8s/cluster/cuckood-services.yaml"],
    }
    (podmon,) = load_yaml(PODMON)
    (svcmon,) = load_yaml(SVCMON)
    for doc, kind in ((podmon, "PodMonitor"), (svcmon, "ServiceMonitor")):
        if doc.get("apiVersion") != "monitoring.coreos.com/v1" or doc.get("kind") != kind:
            problem("%s: not a monitoring.coreos.com/v1 %s" % (kind, kind))
    pod_sel = podmon["spec"]["selector"]["matchLabels"]
    pod_ports = [e["port"] for e in podmon["spec"]["podMetricsEndpoints"]]
    svc_sel = svcmon["spec"]["selector"]["matchLabels"]
    svc_ports = [e["port"] for e in svcmon["spec"]["endpoints"]]
    kept = set()
    for e in svcmon["spec"]["endpoints"]:
        for r in e.get("relabelings", []):
            if r.get("action") == "keep" and r.get("sourceLabels") == ["__meta_kubernetes_service_name"]:
                kept.add(r["regex"])
    for deployment, files in deployments.items():
        docs = [d for f in files for d in load_yaml(os.path.join(ROOT, f)) if d]
        pods = [d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "cuckood"]
        if len(pods) != 1:
            problem("%s: no StatefulSet cuckood" % deployment)
            continue
        tmpl = pods[0]["spec"]["template"]
        labels = tmpl["metadata"].get("labels", {})
        if any(labels.get(k) != v for k, v in pod_sel.items()):
            problem("PodMonitor selector %s does not match %s's pod labels %s" % (pod_sel, deployment, labels))
        cports = {p.get("name") for c in tmpl["spec"]["containers"] if c["name"] == "cuckood"
                  for p in c.get("ports", [])}
        for p in pod_ports:
            if p not in cports:
                problem("PodMonitor port %s is not a port of %s's cuckood container %s" % (p, deployment, sorted(cports)))
        services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
        selected = [n for n, s in services.items()
                    if all(s["metadata"].get("labels", {}).get(k) == v for k, v in svc_sel.items())
                    and any(re.fullmatch(k, n) for k in kept)]
        if len(selected) != 1:
            problem("ServiceMonitor selects %d Services of %s (want 1): %s" % (len(selected), deployment, selected))
            continue
        s = services[selected[0]]
        sports = {p.get("name") for p in s["spec"]["ports"]}
        for p in svc_ports:
            if p not in sports:
                problem("ServiceMonitor port %s is not a port of %s's Service %s" % (p, deployment, selected[0]))
        if any(labels.get(k) != v for k, v in s["spec"]["selector"].items()):
            problem("%s's Service %s does not select the cuckood pods" % (deployment, selected[0]))
        print("%s: the PodMonitor selects its pods (port %s), the ServiceMonitor its Service %s (port %s)"
              % (deployment, ",".join(pod_ports), selected[0], ",".join(svc_ports)))


# ------------------------------------------------------- 4. dashboard

def check_dashboard():
    try:
        with open(DASHBOARD) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        problem("%s: %s" % (rel(DASHBOARD), e))
        return []
    variables = dash.get("templating", {}).get("list", [])
    ds_vars = [v["name"] for v in variables if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    if len(ds_vars) != 1:
        problem("%s: wants one datasource variable of type prometheus, has %s" % (rel(DASHBOARD), ds_vars))
        return []
    ds_ref = "${%s}" % ds_vars[0]
    if "__inputs" in dash:
        problem("%s: has __inputs (an export for sharing); provisioning wants none" % rel(DASHBOARD))

    def check_ds(ds, where):
        if not isinstance(ds, dict) or ds.get("type") != "prometheus" or ds.get("uid") != ds_ref:
            problem("%s: %s: datasource %r, not {type: prometheus, uid: %s}" % (rel(DASHBOARD), where, ds, ds_ref))

    queries = []
    for v in variables:
        if v.get("type") == "query":
            check_ds(v.get("datasource"), "variable " + v["name"])
            q = v.get("query")
            queries.append(("variable " + v["name"], q["query"] if isinstance(q, dict) else q))
    panels, ids = [], set()
    stack = list(dash.get("panels", []))
    while stack:
        p = stack.pop(0)
        stack.extend(p.get("panels", []))
        if p.get("id") in ids:
            problem("%s: panel id %s twice" % (rel(DASHBOARD), p.get("id")))
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        panels.append(p)
        where = "panel %r" % p.get("title")
        check_ds(p.get("datasource"), where)
        if not p.get("targets"):
            problem("%s: %s has no queries" % (rel(DASHBOARD), where))
        for t in p.get("targets", []):
            check_ds(t.get("datasource"), where)
            if not t.get("expr"):
                problem("%s: %s: a query without expr" % (rel(DASHBOARD), where))
            queries.append((where, t.get("expr", "")))
    text = json.dumps(dash)
    for uid in re.findall(r'"uid":\s*"([^"]*)"', text):
        if uid != ds_ref and uid != dash.get("uid"):
            problem("%s: a hard-coded uid %r" % (rel(DASHBOARD), uid))
    print("%s: valid JSON, %d panels, %d queries, every one on the datasource variable %s"
          % (rel(DASHBOARD), len(panels), len(queries), ds_ref))
    return queries


def check_query_syntax(queries):
    """Every query parses as PromQL: promtool check rules on recording rules
    made of them, Grafana's variables replaced by values of their kind."""
    if not shutil.which("promtool"):
        sys.exit("check-monitoring: promtool is needed (Debian's prometheus)")
    rules = []
    for i, (where, q) in enumerate(queries):
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q, re.S)
        if m:
            q = m.group(1)
        q = q.replace("$__rate_interval", "5m")
        q = re.sub(r"\$\{?(job|instance|filter)\}?", ".*", q)
        if "$" in q:
            problem("%s: %s: a variable this check does not know: %s" % (rel(DASHBOARD), where, q))
            continue
        rules.append({"record": "dashboard:query_%d" % i, "expr": q})
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        f.flush()
        r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    if r.returncode != 0:
        problem("%s: promtool does not parse every query:\n%s" % (rel(DASHBOARD), r.stdout + r.stderr))
    else:
        print("%s: every query parses (promtool check rules)" % rel(DASHBOARD))


# ------------------------------------------------------- 5. metric names

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "inf", "nan", "atan2"}


def metric_names(expr):
    """Metric names in a PromQL expression (or a Grafana label_values() query)."""
    m = re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*\w+\s*\)\s*", expr)
    if m:
        return {m.group(1)}
    m = re.fullmatch(r"\s*label_values\(\s*(.*)\s*,\s*\w+\s*\)\s*", expr, re.S)
    if m:
        expr = m.group(1)
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)  # strings
    e = re.sub(r"\$\{[^}]*\}|\$\w+", " ", e)  # Grafana variables
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+-?\w+", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word in KEYWORDS:
            continue
        names.add(word)
    return names


def wait_for(what, fn, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for " + what)


def log_match(path, pattern):
    try:
        with open(path) as f:
            m = re.search(pattern, f.read())
        return m and m.group(1)
    except OSError:
        return None


class Servers:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="check-monitoring.")
        self.procs = []

    def start(self, name, argv):
        log = os.path.join(self.tmp, name + ".log")
        p = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=self.tmp)
        self.procs.append((name, p, log))
        return p, log

    def check_alive(self):
        for name, p, log in self.procs:
            if p.poll() is not None:
                with open(log) as f:
                    tail = f.read()[-2000:]
                raise RuntimeError("%s exited (%s):\n%s" % (name, p.returncode, tail))

    def stop(self):
        for name, p, log in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][\w:]*)(?:\{[^\n]*\})? \S+$", text, re.M)}


def resp(sock, *args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)
    reply = sock.recv(65536)
    if not reply:
        raise RuntimeError("the Redis port closed the connection after %s" % (args,))
    return reply


def live_metrics():
    for path in (CUCKOOD, CUCKOOCTL):
        if not os.access(path, os.X_OK):
            sys.exit("check-monitoring: %s is not built (scripts/build.sh release)" % rel(path))
    for tool in ("openssl", "nats-server"):
        if not shutil.which(tool):
            sys.exit("check-monitoring: %s is needed (Debian's %s)" % (tool, tool))
    s = Servers()
    try:
        t = s.tmp
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", t + "/tls.key", "-out", t + "/tls.crt"],
                       check=True, capture_output=True)
        token = "ck_" + secrets.token_urlsafe(32)
        with open(t + "/tokens", "w") as f:
            f.write("token ops sha256:%s admin:*\n" % hashlib.sha256(token.encode()).hexdigest())
        os.mkdir(t + "/single")
        _, log1 = s.start("cuckood", [
            CUCKOOD, "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--redis-listen=127.0.0.1:0",
            "--data-dir=" + t + "/single", "--tls-cert=" + t + "/tls.crt", "--tls-key=" + t + "/tls.key",
            "--auth-tokens=" + t + "/tokens", "--memory-budget=64MiB", "--snapshot-interval=1h"])
        os.mkdir(t + "/js")
        _, nlog = s.start("nats-server", ["nats-server", "-js", "-a", "127.0.0.1", "-p", "-1", "-sd", t + "/js"])

        def port_in(log, pattern):
            def f():
                s.check_alive()
                return log_match(log, pattern)
            return wait_for(pattern + " in " + os.path.basename(log), f)

        nats_port = port_in(nlog, r"Listening for client connections on [\d.]+:(\d+)")
        os.mkdir(t + "/replica")
        _, log2 = s.start("cuckood-replica", [
            CUCKOOD, "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0",
            "--data-dir=" + t + "/replica", "--nats=nats://127.0.0.1:" + nats_port,
            "--replica-id=check", "--nats-replicas=1", "--memory-budget=64MiB"])
        grpc1 = port_in(log1, r"serving on 127\.0\.0\.1:(\d+)")
        admin1 = port_in(log1, r"admin HTTP on 127\.0\.0\.1:(\d+)")
        redis1 = port_in(log1, r"Redis protocol .* on 127\.0\.0\.1:(\d+)")
        admin2 = port_in(log2, r"admin HTTP on 127\.0\.0\.1:(\d+)")

        def ctl(*args, ok=True):
            r = subprocess.run([CUCKOOCTL, "--target=127.0.0.1:" + grpc1, "--ca=" + t + "/tls.crt",
                                "--timeout=10s", *args], capture_output=True, text=True)
            if ok and r.returncode != 0:
                raise RuntimeError("cuckooctl %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
            return r

        tok = "--token=" + token
        ctl(tok, "create", "fixed", "--capacity=1000")
        ctl(tok, "create", "growing", "--capacity=100", "--growth-factor=2")
        ctl(tok, "insert", "fixed", *("k%d" % i for i in range(50)))
        ctl(tok, "insert", "growing", *("k%d" % i for i in range(300)))
        ctl(tok, "lookup", "fixed", "k1", "k3")
        ctl(tok, "count", "fixed", "k1")
        ctl(tok, "delete", "fixed", "k2")
        ctl(tok, "snapshot")
        if ctl("list", ok=False).returncode == 0:
            raise RuntimeError("cuckooctl list without a token succeeded: authentication is not on")
        ctx = ssl.create_default_context(cafile=t + "/tls.crt")
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(redis1)), timeout=10),
                             server_hostname="localhost") as r:
            if not resp(r, "AUTH", "ck_not_a_token_of_this_server_at_all").startswith(b"-WRONGPASS"):
                raise RuntimeError("AUTH with an unknown token was not refused")
            if resp(r, "AUTH", token) != b"+OK\r\n":
                raise RuntimeError("AUTH with the token failed")
            resp(r, "CF.RESERVE", "redis", "1000")
            resp(r, "CF.ADD", "redis", "x")
            resp(r, "CF.EXISTS", "redis", "x")
            resp(r, "QUIT")
        def replica_metrics():
            s.check_alive()
            if not log_match(log2, r"(cluster: applying stream)"):
                return None
            m = scrape(admin2)
            return m if "cuckood_cluster_applied_position" in m else None

        return scrape(admin1) | wait_for("the replica's cluster metrics", replica_metrics)
    finally:
        s.stop()


def check_metrics(rules, queries, have):
    used = {}
    for group in rules["groups"]:
        for r in group["rules"]:
            for n in metric_names(r["expr"]):
                used.setdefault(n, set()).add("alert " + r.get("alert", r.get("record", "?")))
    for where, q in queries:
        for n in metric_names(q):
            used.setdefault(n, set()).add("dashboard " + where)
    missing = sorted(n for n in used if n not in have and n not in PROMETHEUS_SERIES)
    for n in missing:
        problem("%s is used by %s but is not in a live cuckood's /metrics"
                % (n, ", ".join(sorted(used[n]))))
    print("metrics: the rules and the dashboard use %d names; %d of them in the live servers' /metrics "
          "(%d names there), %s Prometheus' own"
          % (len(used), len([n for n in used if n in have]), len(have),
             ", ".join(sorted(n for n in used if n in PROMETHEUS_SERIES)) or "none"))


def main():
    args = sys.argv[1:]
    if args not in ([], ["--write"], ["--static"]):
        sys.exit(__doc__)
    if args == ["--write"]:
        with open(PROMRULE, "w") as f:
            f.write(prometheusrule_text())
        print("wrote " + rel(PROMRULE))
    check_prometheusrule()
    rules = check_alerts()
    check_monitors()
    queries = check_dashboard()
    check_query_syntax(queries)
    if args != ["--static"]:
        try:
            have = live_metrics()
        except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
            sys.exit("check-monitoring: the live servers: %s" % e)
        check_metrics(rules, queries, have)
    if problems:
        sys.exit("check-monitoring: %d problem(s)" % len(problems))
    print("check-monitoring: all good")


if __name__ == "__main__":
    main()
