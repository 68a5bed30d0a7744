// The queen-raft dashboard: a page over the node's JSON API, nothing fetched from anywhere else.
// State lives in the URL fragment (#view=timers&queue=Q&prefix=P), so a view can be bookmarked;
// #token=T is read once into sessionStorage and then dropped from the address bar, so the token
// does not stay in the history. Every text from the server is set as text, never as HTML.
"use strict";

const REFRESH_MS = 2000;
const PAGE_SIZE = 50;
const LAG_WINDOW_MS = 5 * 60 * 1000;
const LAG_STEP_MS = 10 * 1000; // each point of the chart: the fires of the last 10 s
const TOKEN_KEY = "queen-raft-token";
const VIEWS = ["cluster", "queues", "timers", "firelag", "dlq"];

const page = {
  view: "cluster", queue: "", prefix: "", cursors: [null], dlqQueue: "", dlqCursors: [null],
  paused: false, timer: null, generation: 0, overview: null, lagSamples: [], firedSamples: [], peek: null,
  armed: null, // the row whose destructive button waits for its confirmation
};

// --- small helpers -------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children.flat()) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

const fmtInt = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));

function fmtDue(ms, nowMs) {
  if (ms === null || ms === undefined) return "—";
  const delta = ms - nowMs;
  const when = new Date(ms).toISOString().replace("T", " ").replace(".000Z", "Z");
  const abs = Math.abs(delta);
  const span = abs < 1000 ? `${abs} ms` : abs < 120000 ? `${(abs / 1000).toFixed(1)} s`
    : abs < 7200000 ? `${Math.round(abs / 60000)} min` : `${(abs / 3600000).toFixed(1)} h`;
  return `${when} (${delta >= 0 ? "in " + span : span + " ago"})`;
}

const fmtSeconds = (s) => (s === null || !isFinite(s) ? "—" : s < 1 ? `${(s * 1000).toFixed(1)} ms` : `${s.toFixed(2)} s`);

function badge(text, kind) { return h("span", { class: `badge ${kind}` }, text); }

// --- the fragment and the token ------------------------------------------------------------------

function readFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  if (params.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, params.get("token"));
    params.delete("token");
  }
  const view = params.get("view");
  page.view = VIEWS.includes(view) ? view : "cluster";
  page.queue = params.get("queue") || "";
  page.prefix = params.get("prefix") || "";
  page.dlqQueue = params.get("dlqQueue") || "";
  writeFragment();
}

function writeFragment() {
  const params = new URLSearchParams({ view: page.view });
  if (page.queue) params.set("queue", page.queue);
  if (page.prefix) params.set("prefix", page.prefix);
  if (page.dlqQueue) params.set("dlqQueue", page.dlqQueue);
  history.replaceState(null, "", "#" + params.toString());
}

const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

// --- the API -------------------------------------------------------------------------------------

class ApiRefusal extends Error {}

async function api(method, path) {
  const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
  let answer;
  try {
    answer = await fetch(path, { method, headers });
  } catch (error) { // the node itself did not answer: no status, no body
    throw new ApiRefusal(`${method} ${path}: the node did not answer (${error.message}); retrying every ${REFRESH_MS / 1000} s`);
  }
  const text = await answer.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
  if (!answer.ok) {
    const code = body && body.error ? body.error : `HTTP ${answer.status}`;
    const message = body && body.message ? body.message : text || answer.statusText;
    throw new ApiRefusal(`${method} ${path}: ${answer.status} ${code}: ${message}`);
  }
  return body;
}

function showError(error) {
  const box = document.getElementById("error");
  box.textContent = error ? error.message || String(error) : "";
  box.hidden = !error;
}

function showNotice(text) {
  const box = document.getElementById("notice");
  box.textContent = text || "";
  box.hidden = !text;
}

// --- refresh -------------------------------------------------------------------------------------

function recordSamples(overview) {
  const at = Date.now();
  page.lagSamples.push({ at, lag: overview.fireLag });
  const fired = overview.counters.fired || {};
  page.firedSamples.push({ at, fired: (fired.appended || 0) + (fired.duplicate || 0) + (fired.failed || 0) + (fired.dlq || 0),
    byQueue: overview.firedByQueue || {} });
  const oldest = at - LAG_WINDOW_MS - LAG_STEP_MS;
  while (page.lagSamples.length && page.lagSamples[0].at < oldest) page.lagSamples.shift();
  while (page.firedSamples.length > 2 && page.firedSamples[0].at < at - LAG_STEP_MS) page.firedSamples.shift();
}

async function refresh() {
  clearTimeout(page.timer);
  const generation = ++page.generation; // a newer refresh owns the next timer
  try {
    if (!token()) throw new ApiRefusal("Type a bearer token of your tenant above to see its data.");
    const overview = await api("GET", "/api/v1/overview");
    page.overview = overview;
    recordSamples(overview);
    document.getElementById("who").textContent = `node ${overview.node} · tenant ${overview.tenant} · ${overview.level}`;
    const content = await VIEW_RENDERERS[page.view](overview);
    const typing = document.activeElement && document.activeElement.closest("#view form");
    if (generation === page.generation && !typing) document.getElementById("view").replaceChildren(...[].concat(content));
    showError(null);
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString("en-GB")}`;
  } catch (error) {
    showError(error);
    if (!page.overview) document.getElementById("view").replaceChildren();
  } finally {
    document.body.dataset.loaded = "true";
    if (!page.paused && generation === page.generation) page.timer = setTimeout(refresh, REFRESH_MS);
  }
}

function setView(view, changes) {
  page.view = view;
  Object.assign(page, changes || {});
  page.peek = null;
  page.armed = null;
  showNotice(null);
  writeFragment();
  markTab();
  refresh();
}

function markTab() {
  for (const link of document.querySelectorAll("#tabs a")) link.classList.toggle("active", link.dataset.view === page.view);
}

// A destructive action: the first click arms the button, the second (within the same row) runs it.
function confirmButton(id, label, action) {
  const armed = page.armed === id;
  return h("button", {
    class: armed ? "danger confirm" : "danger", "data-action": label.toLowerCase(),
    onclick: async () => {
      if (!armed) { page.armed = id; refresh(); return; }
      page.armed = null;
      try { showNotice(await action()); showError(null); } catch (error) { showError(error); }
      refresh();
    },
  }, armed ? `Confirm ${label.toLowerCase()}?` : label);
}

// --- views ---------------------------------------------------------------------------------------

function renderCluster(overview) {
  const tenants = new Set();
  for (const node of overview.nodes) for (const name of Object.keys(node.groups)) tenants.add(name);
  const nodeCards = h("div", { class: "cards" }, overview.nodes.map((node) => h("div", { class: "card", "data-node": node.node },
    h("div", { class: "label" }, `node ${node.node}${node.node === overview.node ? " (this page)" : ""}`),
    h("div", { class: "value" }, node.reachable
      ? badge(node.status, node.status === "healthy" ? "good" : node.status === "settling" ? "warn" : "bad")
      : badge("unreachable", "bad")),
    h("div", { class: "muted" }, node.url))));
  const groups = [...tenants].sort().map((tenant) => {
    const leader = overview.nodes.map((n) => n.groups[tenant]).find((g) => g && g.role === "leader");
    return h("section", { class: "panel", "data-tenant": tenant },
      h("h2", {}, `Group ${tenant} · leader `, h("span", { class: "leader", id: `leader-${tenant}` },
        leader ? leader.leaderNode || leader.leader : "none"), linksSummary(overview, tenant)),
      h("table", {},
        h("thead", {}, h("tr", {}, ["node", "role", "leader", "term", "commit index", "applied index", "lag", "peer links", "problem"]
          .map((name, i) => h("th", { class: i >= 3 && i <= 6 ? "num" : "" }, name)))),
        h("tbody", {}, overview.nodes.map((node) => {
          const g = node.groups[tenant];
          if (!g) return h("tr", {}, h("td", {}, node.node), h("td", { colspan: 8, class: "muted" }, node.error || "no answer"));
          return h("tr", { "data-node": node.node },
            h("td", {}, node.node), h("td", {}, g.role === "leader" ? badge("leader", "good") : g.role || "—"),
            h("td", {}, g.leaderNode || g.leader || "—"), h("td", { class: "num" }, fmtInt(g.term)),
            h("td", { class: "num" }, fmtInt(g.commitIndex)), h("td", { class: "num" }, fmtInt(g.appliedIndex)),
            h("td", { class: "num" }, fmtInt(g.lag)), h("td", { class: "links" }, peerLinkBadges(g)),
            h("td", {}, g.problem ? badge(g.problem, "bad") : "—"));
        }))));
  });
  return [nodeCards, ...groups];
}

function firesPerSecond(count = (sample) => sample.fired) {
  const samples = page.firedSamples;
  if (samples.length < 2) return null;
  const first = samples[0], last = samples[samples.length - 1];
  return last.at > first.at ? ((count(last) - count(first)) * 1000) / (last.at - first.at) : null;
}

// A queue's fires are counted by the node that leads the tenant's group (firedByQueue): elsewhere
// the column shows a dash and the page names the leader.
function queueFiresPerSecond(overview, queue) {
  if (leaderHint(overview, "queues")) return "—";
  const rate = firesPerSecond((sample) => sample.byQueue[queue] || 0);
  return rate === null ? "…" : rate.toFixed(1);
}

function renderQueues(overview) {
  const c = overview.counters, rate = firesPerSecond();
  const cards = h("div", { class: "cards" },
    [["pending timers", fmtInt(c.pendingTimers)], ["fires / s (tenant)", rate === null ? "…" : rate.toFixed(1)],
     ["fired, appended", fmtInt((c.fired || {}).appended)], ["fired to DLQ", fmtInt((c.fired || {}).dlq)],
     ["messages pushed", fmtInt(c.pushedMessages)], ["scheduling", overview.schedulingPaused ? "paused" : "on"]]
      .map(([label, value]) => h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value))));
  const rows = overview.queues.map((q) => h("tr", { "data-queue": q.queue },
    h("td", {}, h("a", { href: "#", onclick: (e) => { e.preventDefault(); setView("timers", { queue: q.queue, prefix: "", cursors: [null] }); } }, q.queue)),
    h("td", { class: "num" }, fmtInt(q.pendingTimers)),
    h("td", {}, q.nextDueAt !== null && q.nextDueAt !== undefined ? fmtDue(q.nextDueAt, overview.nowMs)
      : q.nextDueAfter ? `after ${fmtDue(q.nextDueAfter, overview.nowMs)}` : "—"),
    h("td", { class: "num" }, fmtInt(q.unsettledMessages)),
    h("td", { class: "num", "data-fires": q.queue }, queueFiresPerSecond(overview, q.queue)),
    h("td", { class: "num" }, q.dlqCount ? h("a", { href: "#", onclick: (e) => { e.preventDefault(); setView("dlq", { dlqQueue: q.queue, dlqCursors: [null] }); } }, fmtInt(q.dlqCount)) : "0")));
  return [cards, h("section", { class: "panel" }, h("h2", {}, "Queues"),
    rows.length ? h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "queue"), h("th", { class: "num" }, "pending timers"),
      h("th", {}, "next due"), h("th", { class: "num" }, "unsettled messages"), h("th", { class: "num" }, "fires / s"),
      h("th", { class: "num" }, "DLQ"))),
    h("tbody", {}, rows)) : h("p", { class: "muted" }, "No queue and no pending timer yet."),
    rows.length ? leaderHint(overview, "queues") : null)];
}

async function renderTimers(overview) {
  const names = overview.queues.map((q) => q.queue);
  if (!page.queue && names.length) page.queue = names[0];
  const queueInput = h("input", { id: "timer-queue", list: "queue-names", value: page.queue, placeholder: "queue" });
  const prefixInput = h("input", { id: "timer-prefix", value: page.prefix, placeholder: "timerKey prefix" });
  const apply = (e) => { e.preventDefault(); setView("timers", { queue: queueInput.value.trim(), prefix: prefixInput.value, cursors: [null] }); };
  const toolbar = h("form", { class: "toolbar", onsubmit: apply },
    h("label", {}, "Queue "), queueInput, h("datalist", { id: "queue-names" }, names.map((n) => h("option", { value: n }))),
    h("label", {}, "Key prefix "), prefixInput, h("button", { type: "submit", class: "primary" }, "Search"));
  if (!page.queue) return h("section", { class: "panel" }, h("h2", {}, "Timers"), toolbar, h("p", { class: "muted" }, "No queue yet."));
  const after = page.cursors[page.cursors.length - 1];
  const query = new URLSearchParams({ limit: PAGE_SIZE });
  if (after) query.set("after", after);
  if (page.prefix) query.set("prefix", page.prefix);
  const list = await api("GET", `/api/v1/timers/${encodeURIComponent(page.queue)}?${query}`);
  const rows = list.rows.map((t) => h("tr", { "data-key": t.timerKey },
    h("td", { class: "key" }, t.timerKey), h("td", {}, fmtDue(t.deliverAt, overview.nowMs)),
    h("td", {}, t.partition), h("td", { class: "key" }, t.txn), h("td", { class: "num" }, fmtInt(t.attempts)),
    h("td", {}, h("button", { "data-action": "peek", onclick: () => peek(t.queue, t.timerKey) }, "Peek"), " ",
      overview.may.cancel ? confirmButton(`cancel:${t.timerKey}`, "Cancel", () => cancel(t.queue, t.timerKey)) : null)));
  const pager = h("div", { class: "toolbar" },
    h("button", { disabled: page.cursors.length < 2, onclick: () => { page.cursors.pop(); refresh(); } }, "‹ Previous"),
    h("button", { disabled: !list.truncated, onclick: () => { page.cursors.push(list.nextAfter); refresh(); } }, "Next ›"),
    h("span", { class: "muted" }, `page ${page.cursors.length} · ${list.rows.length} timer(s)`));
  const panel = h("section", { class: "panel" }, h("h2", {}, `Timers of ${page.queue}`), toolbar,
    rows.length ? h("table", { id: "timer-list" }, h("thead", {}, h("tr", {}, ["timerKey", "deliver at", "partition", "txn", "attempts", ""]
      .map((n) => h("th", { class: n === "attempts" ? "num" : "" }, n)))), h("tbody", {}, rows))
      : h("p", { class: "muted", id: "no-timers" }, "No pending timer matches."), pager);
  return page.peek ? [panel, h("section", { class: "panel", id: "peek" }, h("h2", {}, `Peek ${page.peek.timerKey}`),
    h("pre", {}, JSON.stringify(page.peek, null, 2)))] : panel;
}

async function peek(queue, key) {
  try { page.peek = await api("GET", `/api/v1/timers/${encodeURIComponent(queue)}/${encodeURIComponent(key)}`); showError(null); }
  catch (error) { showError(error); }
  refresh();
}

async function cancel(queue, key) {
  const answer = await api("DELETE", `/api/v1/timers/${encodeURIComponent(queue)}/${encodeURIComponent(key)}`);
  return `Cancel of ${key}: ${answer.status}`;
}

// histogram_quantile's rule: linear inside the bucket the rank falls in.
function quantile(q, bounds, counts) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total <= 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    if (seen + counts[i] >= rank && counts[i] > 0) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const low = i === 0 ? 0 : bounds[i - 1];
      return low + (bounds[i] - low) * ((rank - seen) / counts[i]);
    }
    seen += counts[i];
  }
  return bounds[bounds.length - 1];
}

function lagPoints() {
  const samples = page.lagSamples, points = [];
  for (let i = 1; i < samples.length; i++) {
    let j = i - 1;
    while (j > 0 && samples[i].at - samples[j - 1].at <= LAG_STEP_MS) j--;
    const now = samples[i].lag, before = samples[j].lag;
    const delta = now.bucketCounts.map((n, k) => n - (before.bucketCounts[k] || 0));
    points.push({ at: samples[i].at, p50: quantile(0.5, now.boundsSeconds, delta), p99: quantile(0.99, now.boundsSeconds, delta) });
  }
  return points;
}

function lagChart(points) {
  const width = 900, height = 280, left = 60, right = 12, top = 12, bottom = 28;
  const end = Date.now(), start = end - LAG_WINDOW_MS;
  const values = points.flatMap((p) => [p.p50, p.p99]).filter((v) => v !== null);
  const maxY = Math.max(0.005, ...values) * 1.15;
  const x = (at) => left + ((at - start) / LAG_WINDOW_MS) * (width - left - right);
  const y = (v) => top + (1 - v / maxY) * (height - top - bottom);
  const grid = [];
  for (let i = 0; i <= 4; i++) {
    const v = (maxY * i) / 4;
    grid.push(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }),
      svg("text", { class: "axis", x: left - 6, y: y(v) + 4, "text-anchor": "end" }, fmtSeconds(v)));
  }
  for (let m = 0; m <= 5; m++) {
    grid.push(svg("text", { class: "axis", x: x(start + m * 60000), y: height - 8, "text-anchor": "middle" }, m === 5 ? "now" : `-${5 - m} min`));
  }
  const line = (name) => {
    const drawn = points.filter((p) => p[name] !== null && p.at >= start);
    return svg("polyline", { class: name, points: drawn.map((p) => `${x(p.at).toFixed(1)},${y(p[name]).toFixed(1)}`).join(" ") });
  };
  return svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", id: "lag-chart" }, grid, line("p50"), line("p99"));
}

// The fire lag and the fires by queue are observed by the group's leader: on another node they
// stay still, so the page names the node to open (its own origin: the token is typed in there again).
const LEADER_HINTS = { firelag: ["lag-leader-hint", "open its fire lag"], queues: ["queues-leader-hint", "open its queues"] };

function leaderHint(overview, view = "firelag") {
  const own = overview.nodes.find((n) => n.node === overview.node);
  const group = own && own.groups[overview.tenant];
  const leader = group && overview.nodes.find((n) => n.node === group.leaderNode);
  if (!leader || leader.node === overview.node) return null;
  const [id, text] = LEADER_HINTS[view];
  return h("p", { class: "muted", id }, `Node ${leader.node} leads ${overview.tenant} and observes its fires: `,
    h("a", { href: `${leader.url}/dashboard#view=${view}` }, text), ".");
}

function renderFireLag(overview) {
  const lag = overview.fireLag, points = lagPoints();
  const last = points.length ? points[points.length - 1] : null;
  const cards = h("div", { class: "cards" },
    [["p50, last 10 s", last ? fmtSeconds(last.p50) : "—"], ["p99, last 10 s", last ? fmtSeconds(last.p99) : "—"],
     ["p50 since start", fmtSeconds(quantile(0.5, lag.boundsSeconds, lag.bucketCounts))],
     ["p99 since start", fmtSeconds(quantile(0.99, lag.boundsSeconds, lag.bucketCounts))],
     ["fires seen here", fmtInt(lag.count)]]
      .map(([label, value]) => h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value))));
  return [cards, h("section", { class: "panel" }, h("h2", {}, `Fire lag on node ${overview.node}, last 5 minutes`),
    h("div", { class: "legend" }, h("span", { class: "p50" }, "p50"), h("span", { class: "p99" }, "p99"),
      h("span", { class: "muted" }, "from this node's histogram, each point over the 10 s before it; the chart fills while the page stays open")),
    leaderHint(overview), lagChart(points))];
}

async function renderDlq(overview) {
  const queueInput = h("input", { id: "dlq-queue", value: page.dlqQueue, placeholder: "every queue" });
  const toolbar = h("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); setView("dlq", { dlqQueue: queueInput.value.trim(), dlqCursors: [null] }); } },
    h("label", {}, "Queue "), queueInput, h("button", { type: "submit", class: "primary" }, "Filter"));
  const query = new URLSearchParams({ limit: PAGE_SIZE });
  const after = page.dlqCursors[page.dlqCursors.length - 1];
  if (after) query.set("after", after);
  if (page.dlqQueue) query.set("queue", page.dlqQueue);
  const list = await api("GET", `/api/v1/dlq?${query}`);
  const rows = list.rows.map((r) => h("tr", { "data-dlq": r.dlqId },
    h("td", {}, r.dlqId), h("td", {}, r.queue), h("td", {}, r.partition), h("td", {}, r.consumerGroup),
    h("td", { class: "key" }, r.timerKey || r.transactionId), h("td", { class: "key" }, r.error || "—"),
    h("td", { class: "num" }, fmtInt(r.attempts)), h("td", {}, r.failedAt ? fmtDue(r.failedAt, overview.nowMs) : "—"),
    h("td", {}, overview.may.replay && !r.timerKey ? confirmButton(`replay:${r.dlqId}`, "Replay", async () => {
      const answer = await api("POST", `/api/v1/dlq/${encodeURIComponent(r.dlqId)}/replay`);
      return `Replayed ${r.dlqId} into ${answer.queue}/${answer.partition}: ${answer.status}`;
    }) : null)));
  const pager = h("div", { class: "toolbar" },
    h("button", { disabled: page.dlqCursors.length < 2, onclick: () => { page.dlqCursors.pop(); refresh(); } }, "‹ Previous"),
    h("button", { disabled: !list.nextAfter, onclick: () => { page.dlqCursors.push(list.nextAfter); refresh(); } }, "Next ›"));
  return h("section", { class: "panel" }, h("h2", {}, "Dead letters"), toolbar,
    rows.length ? h("table", {}, h("thead", {}, h("tr", {}, ["dlqId", "queue", "partition", "group", "timerKey / txn", "error", "attempts", "failed", ""]
      .map((n) => h("th", { class: n === "attempts" ? "num" : "" }, n)))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, "Nothing dead-lettered."), pager);
}

const VIEW_RENDERERS = { cluster: renderCluster, queues: renderQueues, timers: renderTimers, firelag: renderFireLag, dlq: renderDlq };

// --- start ---------------------------------------------------------------------------------------

function start() {
  readFragment();
  markTab();
  for (const link of document.querySelectorAll("#tabs a")) {
    link.addEventListener("click", (e) => { e.preventDefault(); setView(link.dataset.view); });
  }
  document.getElementById("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("token");
    if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    page.overview = null;
    page.lagSamples = [];
    page.firedSamples = [];
    refresh();
  });
  const pause = document.getElementById("pause");
  pause.addEventListener("click", () => {
    page.paused = !page.paused;
    pause.textContent = page.paused ? "Resume" : "Pause";
    if (page.paused) clearTimeout(page.timer); else refresh();
  });
  window.addEventListener("hashchange", () => {
    readFragment();
    setView(page.view, { cursors: [null], dlqCursors: [null] });
  });
  refresh();
}

start();
