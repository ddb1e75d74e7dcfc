// The dashboard: read-only views of the Host API v2 (host-api.md), with the token the user typed
// (kept in memory only). It only ever sends GETs. Charts are Chart.js (vendor/).
"use strict";
let token = "";
let closeDetail = () => {};  // stops the open view's polling and log stream
const $ = (id) => document.getElementById(id);
const FORMS = /^https:\/\/edge\.forms\.takoform\.com\/forms\//;
const enc = encodeURIComponent;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) e[k] = v; else e.setAttribute(k, v);
  }
  e.append(...children.map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
  return e;
}
const pre = (obj) => el("pre", {}, JSON.stringify(obj, null, 2));
const row = (cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c)));
const link = (label, onclick, attrs = {}) =>
  el("a", { href: "#", ...attrs, onclick: (e) => { e.preventDefault(); onclick().catch(show); } }, label);

async function get(path) {
  const r = await fetch(path, { headers: { Authorization: `Bearer ${token}` } });
  const body = await r.json();
  if (!r.ok) throw new Error(`${r.status} ${body.code || ""}: ${body.detail || ""}`);
  return body;
}

function show(err) { $("status").className = "err"; $("status").textContent = err.message; }

// ---- Spaces, Resources, Operations -----------------------------------------------------------

async function loadSpaces() {
  const { items } = await get("/v2/spaces");
  $("spaces").replaceChildren(...items.map((s) => {
    const a = link(`${s.name} (${s.role})`, () => loadResources(s.name), { "data-space": s.name });
    a.addEventListener("click", () => {
      document.querySelectorAll("#spaces a").forEach((x) => x.classList.remove("on"));
      a.classList.add("on");
    });
    return el("li", {}, a);
  }));
  $("status").className = ""; $("status").textContent = `${items.length} Space(s)`;
}

async function loadResources(space) {
  $("space-name").textContent = `in ${space}`;
  const items = [];
  let cursor = null;
  do {  // follow nextCursor so large Spaces list whole
    const q = cursor ? `?cursor=${enc(cursor)}` : "";
    const page = await get(`/v2/spaces/${enc(space)}/resources${q}`);
    items.push(...page.items); cursor = page.nextCursor;
  } while (cursor);
  $("resources").replaceChildren(...items.map((r) => row([
    link(r.name, () => loadDetail(r), { "data-resource": r.name }),
    r.form.replace(FORMS, ""), r.state, observedText(r.observed), r.generation, r.updatedAt,
  ])));
}

function observedText(observed) {
  const parts = Object.entries(observed || {}).filter(([k]) => k !== "observedAt")
    .map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`);
  return parts.join(", ") || "—";
}

async function loadDetail(r) {
  closeDetail(); closeDetail = () => {};
  $("detail-title").textContent = `${r.name} · ${r.form.replace(FORMS, "")}`;
  const views = { "/AtLeastOnceQueue/": queueView, "/DurableWorkflow/": workflowView, "/ModuleWorker/": workerView };
  const view = Object.entries(views).find(([k]) => r.form.includes(k));
  $("detail").replaceChildren(...(view ? await view[1](r) : []), el("h3", {}, "Resource"), pre(r));
}

// ---- a queue: its counts over time as a chart, and its peek ------------------------------------

const SERIES = [["ready", "#2747a8"], ["inFlight", "#c90"], ["delayed", "#888"],
  ["acknowledged", "#3a3"], ["retried", "#a3c"], ["deadLettered", "#c33"], ["discarded", "#555"]];

async function queueView(r) {
  const base = `/v2/spaces/${enc(r.space)}/queues/${r.uid}`;
  const canvas = el("canvas", { "data-testid": "queue-chart" });
  const chart = new Chart(canvas, {
    type: "line",
    data: { labels: [], datasets: SERIES.map(([k, c]) => ({ label: k, data: [], borderColor: c, tension: .2 })) },
    options: { animation: false, maintainAspectRatio: false, scales: { y: { beginAtZero: true } } },
  });
  const peek = el("tbody", { "data-testid": "peek" });
  const refresh = async () => {
    const [stats, page] = await Promise.all([get(`${base}/stats`), get(`${base}/messages?limit=20&includeBody=true`)]);
    chart.data.labels.push(new Date(stats.observedAt).toLocaleTimeString());
    SERIES.forEach(([k], i) => chart.data.datasets[i].data.push(stats[k]));
    if (chart.data.labels.length > 120) { chart.data.labels.shift(); chart.data.datasets.forEach((d) => d.data.shift()); }
    chart.update();
    peek.replaceChildren(...page.items.map((m) => row([m.id, m.state, m.attempts, m.size, preview(m.body)])));
  };
  await refresh();
  const timer = setInterval(() => refresh().catch(show), 2000);
  closeDetail = () => { clearInterval(timer); chart.destroy(); };
  return [el("h3", {}, "Counts over time"), el("div", { class: "chart" }, canvas),
    el("h3", {}, "Peek (oldest first)"),
    el("table", {}, el("thead", {}, row(["id", "state", "attempts", "size", "body"])), peek)];
}

function preview(b64) {
  try { return new TextDecoder().decode(Uint8Array.from(atob(b64 || ""), (c) => c.charCodeAt(0))).slice(0, 80); }
  catch { return "(binary)"; }
}

// ---- a workflow: its instances by status, with search; an instance's history as a timeline ---------

const STATUSES = ["queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"];

async function workflowView(r) {
  const base = `/v2/spaces/${enc(r.space)}/workflows/${r.uid}/instances`;
  const counts = r.observed?.instanceCounts || {};
  const status = el("select", { "data-testid": "status-filter" }, el("option", { value: "" }, "any status"),
    ...STATUSES.map((s) => el("option", { value: s }, `${s} (${counts[s] ?? "?"})`)));
  const search = el("input", { placeholder: "search instance IDs", "data-testid": "instance-search" });
  const list = el("tbody", { "data-testid": "instances" });
  const one = el("div", { id: "instance", "data-testid": "instance" });
  let items = [];
  const draw = () => {
    const needle = search.value.trim();
    list.replaceChildren(...items.filter((i) => i.id.includes(needle)).map((i) => row([
      link(i.id, () => instanceView(base, i.id, one), { "data-instance": i.id }), i.status, i.createdAt, i.updatedAt,
    ])));
  };
  const load = async () => {
    const q = status.value ? `&status=${status.value}` : "";
    items = (await get(`${base}?limit=100${q}`)).items; draw();
  };
  status.onchange = () => load().catch(show);
  search.oninput = draw;
  await load();
  const chart = el("canvas", { "data-testid": "status-chart" });
  const bars = new Chart(chart, {
    type: "bar",
    data: { labels: STATUSES, datasets: [{ label: "instances", data: STATUSES.map((s) => counts[s] || 0) }] },
    options: { animation: false, maintainAspectRatio: false, plugins: { legend: { display: false } } },
  });
  closeDetail = () => bars.destroy();
  return [el("h3", {}, "Instances by status"), el("div", { class: "chart" }, chart),
    el("div", { class: "counts" }, status, search),
    el("table", {}, el("thead", {}, row(["id", "status", "created", "updated"])), list), one];
}

const COLOURS = { StepAttemptCommitted: "#3a3", SleepScheduled: "#c90", WaitScheduled: "#c90",
  RetryScheduled: "#a3c", EventAccepted: "#2747a8", InstanceStatusChanged: "#555", InstanceContextStarted: "#9ab" };

function what(h) {
  const d = h.data || {};
  const bits = [d.name, d.kind, d.attempt && `attempt ${d.attempt}`, d.ok === false && "failed",
    d.errorName, d.status, d.reason, d.type, d.eventType].filter(Boolean);
  return `${h.type} ${bits.join(" · ")}`;
}

async function instanceView(base, id, into) {
  const path = `${base}/${enc(id)}`;  // IDs may hold any character, "/" too
  const [inst, history] = await Promise.all([get(path), get(`${path}/history`)]);
  const items = history.items;
  const t0 = items.length ? Date.parse(items[0].at) : 0;
  const spans = items.map((h, i) => [i ? Date.parse(items[i - 1].at) - t0 : 0, Date.parse(h.at) - t0]);
  const canvas = el("canvas", { "data-testid": "timeline" });
  into.chart?.destroy();
  into.chart = new Chart(canvas, {
    type: "bar",
    data: { labels: items.map((h) => `${h.seq} ${what(h)}`.slice(0, 60)),
      datasets: [{ label: "ms since the instance was created", data: spans,
        backgroundColor: items.map((h) => (h.data?.ok === false ? "#c33" : COLOURS[h.type] || "#888")) }] },
    options: { indexAxis: "y", animation: false, maintainAspectRatio: false, plugins: { legend: { display: false } },
      scales: { x: { title: { display: true, text: "ms since created" } } } },
  });
  const events = el("ul", { class: "events", "data-testid": "history" }, ...items.map((h, i) => {
    const ms = i ? Date.parse(h.at) - Date.parse(items[i - 1].at) : 0;
    const cls = h.data?.ok === false ? "failed" : h.data?.ok ? "ok" : (h.data?.kind || h.data?.status || "");
    return el("li", { class: cls }, `#${h.seq} +${ms} ms  ${what(h)}`);
  }));
  into.replaceChildren(el("h3", {}, `Instance ${id}: ${inst.status}`),
    el("div", { class: "timeline" }, canvas), events, pre(inst));
}

// ---- a worker: its live log ---------------------------------------------------------------------

async function workerView(r) {
  const out = el("div", { class: "log", "data-testid": "log" });
  const add = (e) => {
    const where = ["batchId", "instanceId", "step"].filter((k) => e[k]).map((k) => `${k} ${e[k]}`).join(", ");
    out.append(el("div", { class: e.level }, `${e.at} ${e.level} ${where ? `[${where}] ` : ""}${e.text}`));
    out.scrollTop = out.scrollHeight;
  };
  const path = `/v2/spaces/${enc(r.space)}/workers/${r.uid}/logs`;
  (await get(`${path}?limit=100`)).items.forEach(add);
  const stop = new AbortController();
  follow(`${path}?follow=true`, add, stop.signal).catch((e) => { if (!stop.signal.aborted) show(e); });
  closeDetail = () => stop.abort();
  return [el("h3", {}, "Live log"), out];
}

// Server-Sent Events over fetch: EventSource cannot send the Authorization header.
async function follow(path, onEvent, signal) {
  const r = await fetch(path, { headers: { Authorization: `Bearer ${token}` }, signal });
  if (!r.ok) throw new Error(`${r.status} following the log`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut); buf = buf.slice(cut + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

$("login").onsubmit = (e) => { e.preventDefault(); token = $("token").value.trim(); loadSpaces().catch(show); };
$("op-form").onsubmit = (e) => {
  e.preventDefault();
  get(`/v2/operations/${enc($("op-id").value.trim())}`)
    .then((op) => { $("operation").textContent = JSON.stringify(op, null, 2); })
    .catch((err) => { $("operation").textContent = err.message; });
};
