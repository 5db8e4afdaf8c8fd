// The kosa8 console page: shows the console's state as it comes (server-
// sent events from /api/events) and answers approvals through
// POST /api/answer with this page's CSRF token, and rewinds and forks
// through POST /api/checkpoint the same way.  Every string shown comes
// from a sandbox and is put in as text, never as markup.
"use strict";

const csrf = document.querySelector('meta[name="kosa8-csrf"]').content;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function bytes(n) {
  if (typeof n !== "number" || n < 0) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : n) + " " + u[i];
}

function duration(s) {
  if (typeof s !== "number" || s < 0) return "";
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + (s % 60) + "s";
  return s + "s";
}

function showSandboxes(list) {
  const body = document.getElementById("sandbox-rows");
  body.replaceChildren();
  for (const s of list) {
    const tr = el("tr");
    tr.id = "sandbox-" + s.name;
    const state = el("td", "state-" + String(s.state).split(" ")[0], s.state);
    if (s.operation && s.operation.what) state.textContent += " (" + s.operation.what + ")";
    tr.append(el("td", "name", s.name), state, el("td", "", duration(s.uptime_s)),
              el("td", "", String(s.cpus)), el("td", "", bytes(s.mem)), el("td", "", bytes(s.rss)),
              el("td", "", s.workspace || ""));
    body.append(tr);
  }
  document.getElementById("no-sandboxes").hidden = list.length > 0;
}

// The host with its registered domain set apart: in
// api.openai.com.evil.example the owner is evil.example.
function hostNode(name, registered) {
  const span = el("span", "host");
  if (registered && name.toLowerCase().endsWith(registered.toLowerCase())) {
    const cut = name.length - registered.length;
    span.append(el("span", "sub", name.slice(0, cut)), el("span", "reg", name.slice(cut)));
  } else {
    span.textContent = name;
  }
  return span;
}

async function answer(r, verb) {
  const out = document.getElementById("answer-result");
  out.className = "";
  out.textContent = "sending…";
  try {
    const res = await post("/api/answer", { sandbox: r.sandbox, id: r.id, answer: verb });
    if (res.ok) {
      out.textContent = r.sandbox + ": request " + r.id + " (" + r.name + "): " + verb;
    } else {
      out.className = "error";
      out.textContent = r.sandbox + ": request " + r.id + ": " + res.text;
    }
  } catch (e) {
    out.className = "error";
    out.textContent = "the console did not answer: " + e;
  }
}

function showApprovals(list) {
  const ul = document.getElementById("approval-list");
  ul.replaceChildren();
  for (const r of list) {
    const li = el("li", "approval");
    li.id = "approval-" + r.sandbox + "-" + r.id;
    const what = el("div", "what");
    what.append(el("strong", "", r.sandbox), document.createTextNode(" asks to " + r.kind + " "),
                hostNode(r.name, r.registered), document.createTextNode(r.port ? ":" + r.port : ""));
    const reg = el("div", "regline");
    if (r.registered) {
      reg.append(document.createTextNode("registered domain: "), el("strong", "registered", r.registered));
    } else {
      reg.append(el("strong", "registered", "no registered domain"));
    }
    const meta = el("div", "meta", "request " + r.id + ", waiting " + Math.round(r.waiting_ms / 1000) + " s");
    const buttons = el("div", "buttons");
    for (const [verb, label] of [["allow", "Allow once"], ["always", "Allow always"], ["deny", "Deny"]]) {
      const b = el("button", verb, label);
      b.id = "answer-" + r.sandbox + "-" + r.id + "-" + verb;
      b.addEventListener("click", () => answer(r, verb));
      buttons.append(b);
    }
    li.append(what, buttons, reg, meta);
    ul.append(li);
  }
  document.getElementById("no-approvals").hidden = list.length > 0;
  const count = document.getElementById("approval-count");
  count.textContent = String(list.length);
  count.classList.toggle("some", list.length > 0);
}

// ---- checkpoint trees: kosa8 rewind and fork, through the console ----

async function post(url, body) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Kosa8-CSRF": csrf },
    body: JSON.stringify(body),
  });
  const j = await res.json().catch(() => ({}));
  return { ok: res.ok && j.ok, text: j.ok ? j.output : (j.error || "refused (" + res.status + ")") };
}

async function checkpointOp(sandbox, id, op) {
  const out = document.getElementById("checkpoint-result");
  const body = { sandbox: sandbox, op: op, checkpoint: id };
  if (op === "fork") {
    body.name = document.getElementById("fork-name").value.trim() || sandbox + "-fork";
  } else if (!window.confirm("Rewind " + sandbox + " to " + id + "? What it did since is lost.")) {
    return;
  }
  const what = op === "fork" ? "fork of " + sandbox + " from " + id + " as " + body.name
                             : "rewind of " + sandbox + " to " + id;
  out.className = "busy";
  out.textContent = what + ": running…";
  try {
    const r = await post("/api/checkpoint", body);
    out.className = r.ok ? "done" : "error";
    out.textContent = what + ": " + (r.ok ? "done" : "failed") + (r.text ? ": " + r.text : "");
  } catch (e) {
    out.className = "error";
    out.textContent = what + ": the console did not answer: " + e;
  }
}

function checkpointNode(s, c, kids, depth) {
  const li = el("li", "ckpt");
  li.id = "ckpt-" + s.name + "-" + c.id;
  const line = el("div", "line");
  const when = c.created ? new Date(c.created * 1000).toLocaleString() : "";
  line.append(el("span", "id", c.id), el("span", "when", when), el("span", "size", bytes(c.memory_bytes)),
              el("span", "msg", c.message || ""));
  if (c.id === s.running_from) line.append(el("span", "here", "running from here"));
  if (s.state === "running") {
    for (const [op, label] of [["rewind", "Rewind"], ["fork", "Fork"]]) {
      const b = el("button", op, label);
      b.id = op + "-" + s.name + "-" + c.id;
      b.addEventListener("click", () => checkpointOp(s.name, c.id, op));
      line.append(b);
    }
  }
  li.append(line);
  const under = kids.get(c.id) || [];
  if (under.length && depth < 64) {
    const ul = el("ul");
    for (const k of under) ul.append(checkpointNode(s, k, kids, depth + 1));
    li.append(ul);
  }
  return li;
}

// Drawn again only when a sandbox's tree or state changed: a click in
// flight must not lose its button.
const treeShown = new Map();

function showCheckpoints(list) {
  const box = document.getElementById("checkpoint-trees");
  let any = false;
  const names = new Set();
  for (const s of list) {
    const cps = s.checkpoints || [];
    if (!cps.length) continue;
    any = true;
    names.add(s.name);
    const key = JSON.stringify([s.state, s.running_from, cps]);
    let div = document.getElementById("tree-" + s.name);
    if (div && treeShown.get(s.name) === key) continue;
    treeShown.set(s.name, key);
    const ids = new Set(cps.map((c) => c.id));
    const kids = new Map();
    const roots = [];
    for (const c of cps) {
      // A checkpoint whose parent's record is gone is drawn at the root.
      if (c.parent && ids.has(c.parent)) {
        if (!kids.has(c.parent)) kids.set(c.parent, []);
        kids.get(c.parent).push(c);
      } else {
        roots.push(c);
      }
    }
    const fresh = el("div", "tree");
    fresh.id = "tree-" + s.name;
    fresh.append(el("h3", "", s.name + " (" + s.state + ")"));
    const ul = el("ul");
    for (const r of roots) ul.append(checkpointNode(s, r, kids, 0));
    fresh.append(ul);
    if (div) div.replaceWith(fresh); else box.append(fresh);
  }
  for (const div of Array.from(box.children)) {
    const name = div.id.slice("tree-".length);
    if (!names.has(name)) { div.remove(); treeShown.delete(name); }
  }
  document.getElementById("no-checkpoints").hidden = any;
}

function show(state) {
  showSandboxes(state.sandboxes || []);
  showApprovals(state.approvals || []);
  showCheckpoints(state.sandboxes || []);
  followEgress(state.audit_log);
  document.body.dataset.loaded = "1";
}

function live() {
  const ind = document.getElementById("live");
  const es = new EventSource("/api/events");
  es.addEventListener("state", (e) => {
    ind.className = "live on";
    ind.textContent = "live";
    show(JSON.parse(e.data));
  });
  es.onerror = () => {
    ind.className = "live off";
    ind.textContent = "reconnecting";
  };
}

// ---- audit log: kosa8 audit verify and show, on demand ----

let auditRecords = [];

function showAuditRows() {
  const q = document.getElementById("audit-filter").value.trim().toLowerCase();
  const body = document.getElementById("audit-rows");
  body.replaceChildren();
  for (const r of auditRecords.slice().reverse()) {
    const details = r.details === undefined ? "" : JSON.stringify(r.details);
    const row = [String(r.seq ?? ""), String(r.time ?? ""), String(r.sandbox ?? ""), String(r.actor ?? ""),
                 String(r.type ?? ""), details];
    if (q && !row.join(" ").toLowerCase().includes(q)) continue;
    const tr = el("tr");
    row.forEach((v, i) => tr.append(el("td", i === 5 ? "details" : "", v)));
    body.append(tr);
  }
}

// ---- egress timeline: live ----

// The state says the audit log's size and change time: when they change,
// new records are there, and the page reads them (records only, no
// verify).  One read at a time; a failed one is tried again.
let egressRecords = [];
let egressWanted, egressShown, egressBusy = false;

function followEgress(mark) {
  egressWanted = JSON.stringify(mark ?? null);
  refreshEgress();
}

async function refreshEgress() {
  if (egressBusy || egressWanted === egressShown) return;
  egressBusy = true;
  const want = egressWanted;
  let ok = false;
  try {
    const res = await fetch("/api/audit/records");
    if (res.ok) {
      egressRecords = (await res.json()).records || [];
      showEgress();
      egressShown = want;
      ok = true;
    }
  } catch (e) {
    // the console is away: the event stream says so, tried again below
  }
  egressBusy = false;
  if (ok) refreshEgress(); else setTimeout(refreshEgress, 1000);
}

// The egress timeline: the audit's net.* records, newest first.
function showEgress() {
  const body = document.getElementById("egress-rows");
  body.replaceChildren();
  let n = 0;
  for (const r of egressRecords.slice().reverse()) {
    if (r.type !== "net.connect" && r.type !== "net.dns") continue;
    const d = r.details || {};
    const decision = String(d.decision ?? "");
    const tr = el("tr", decision === "allow" ? "" : "denied");
    const name = String(d.name ?? d.address ?? "") + (d.port ? ":" + d.port : "");
    const what = r.type === "net.dns" ? "DNS " + String(d.qtype ?? "") : String(d.protocol ?? "connect");
    tr.append(el("td", "", String(r.time ?? "")), el("td", "", String(r.sandbox ?? "")), el("td", "", what),
              el("td", "name", name), el("td", "decision", decision + (d.asked ? " (asked)" : "")),
              el("td", "bytes", r.type === "net.connect" ? bytes(d.bytes_up) : ""),
              el("td", "bytes", r.type === "net.connect" ? bytes(d.bytes_down) : ""),
              el("td", "bytes", typeof d.duration_ms === "number" ? d.duration_ms + " ms" : ""));
    body.append(tr);
    n++;
  }
  document.getElementById("no-egress").hidden = n > 0;
}

async function loadAudit() {
  const verdict = document.getElementById("audit-verdict");
  verdict.className = "verdict";
  verdict.textContent = "verifying…";
  try {
    const res = await fetch("/api/audit");
    if (!res.ok) throw new Error(res.status === 503 ? "busy: a verify is running" : "status " + res.status);
    const j = await res.json();
    const st = j.verify.status;
    verdict.className = "verdict " + (st === 0 ? "ok" : st === 1 ? "broken" : "unknown");
    verdict.textContent = st === 0 ? "verified" : st === 1 ? "BROKEN" : "could not verify";
    document.getElementById("audit-text").textContent = j.verify.text;
    auditRecords = j.records || [];
    showAuditRows();
  } catch (e) {
    verdict.className = "verdict unknown";
    verdict.textContent = "could not verify: " + e.message;
  }
}

document.getElementById("audit-verify").addEventListener("click", loadAudit);
document.getElementById("audit-filter").addEventListener("input", showAuditRows);

fetch("/api/state").then((r) => r.json()).then(show).catch(() => {});
live();
loadAudit();
