// exo's dashboard: the cluster as the gateway's /v1/cluster and /v1/events
// describe it, jobs with their placement and tokens/s, and a chat box on
// /v1/chat/completions. Plain DOM code, no external requests, nothing inline
// (the gateway's Content-Security-Policy is default-src 'self').
"use strict";

const TOKEN_KEY = "exo.token";
const MAX_JOBS = 20;
const MAX_EVENTS = 100;
const RATE_WINDOW_MS = 5000;
const SVG_NS = "http://www.w3.org/2000/svg";

const state = {
  cluster: { node: "", coordinator: "", nodes: [], devices: [], links: [],
             thermal: [], jobs: [], models: [], stages: [] },
  loaded: false,       // a snapshot has arrived
  authNeeded: false,   // the last call was answered 401
  jobs: new Map(),     // job id -> what the page knows of it
  events: 0,
};

const $ = id => document.getElementById(id);

// ---- DOM helpers ----------------------------------------------------------

function build(el, attrs, kids) {
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false)
      continue;
    if (k === "text")
      el.textContent = v;
    else
      el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) {
    if (kid !== null && kid !== undefined && kid !== false)
      el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}
const h = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
const s = (tag, attrs, ...kids) =>
  build(document.createElementNS(SVG_NS, tag), attrs, kids);

// Replaces what `el` shows only when `key` (the data it shows) changed, so a
// refresh with nothing new does not disturb hovering or selection.
function renderInto(el, key, make) {
  if (el.dataset.key === key)
    return;
  el.dataset.key = key;
  el.replaceChildren(...[make()].flat());
}

// ---- formatting -----------------------------------------------------------

function fmtBytes(b) {
  if (!Number.isFinite(b))
    return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) {
    b /= 1024;
    i++;
  }
  return `${b.toFixed(i > 0 && Math.abs(b) < 100 ? 1 : 0)} ${units[i]}`;
}
function fmtRate(bytesPerS) {
  if (!(bytesPerS > 0))
    return "? B/s";
  const units = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
  let i = 0;
  while (bytesPerS >= 1000 && i < units.length - 1) {
    bytesPerS /= 1000;
    i++;
  }
  return `${bytesPerS.toFixed(bytesPerS < 10 ? 1 : 0)} ${units[i]}`;
}
function fmtUs(us) {
  if (!Number.isFinite(us))
    return "?";
  return us < 1000 ? `${Math.round(us)} µs` : `${(us / 1000).toFixed(2)} ms`;
}
// x with `digits` decimals, "?" when it is not a number.
function fixed(x, digits = 0) {
  return Number.isFinite(x) ? x.toFixed(digits) : "?";
}
function fmtTime(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}
const fmtLayers = st => st.first_layer === st.last_layer
  ? `layer ${st.first_layer}` : `layers ${st.first_layer}–${st.last_layer}`;
const deviceKey = (node, id) => `${node}/${id}`;
const by = key => (a, b) => String(key(a)).localeCompare(String(key(b)));

// ---- the API --------------------------------------------------------------

class Unauthorized extends Error {}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

// A token given as #token=... is kept and taken out of the address bar.
function takeFragmentToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (!m)
    return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
}

async function api(path, init = {}) {
  const headers = new Headers(init.headers);
  if (token())
    headers.set("Authorization", `Bearer ${token()}`);
  const res = await fetch(path, { ...init, headers, cache: "no-store" });
  if (res.status === 401) {
    askForToken();
    throw new Unauthorized(`${path}: 401`);
  }
  return res;
}

// The message of an OpenAI-shaped error body, else the status line.
async function errorText(res) {
  try {
    const body = await res.json();
    if (body?.error?.message)
      return `${res.status}: ${body.error.message}`;
  } catch {
    // not JSON: fall through
  }
  return `${res.status} ${res.statusText}`.trim();
}

function askForToken() {
  const had = token() !== "";
  state.authNeeded = true;
  closeEvents();
  $("token-why").textContent = had ? "The token was refused; enter another"
                                   : "This gateway needs an access token";
  $("token-form").hidden = false;
  $("token-input").focus();
  setFacts("access token needed");
  scheduleRender();
}

$("token-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const value = $("token-input").value.trim();
  if (!value)
    return;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token-input").value = "";
  $("token-form").hidden = true;
  state.authNeeded = false;
  start();
});

// ---- the cluster snapshot -------------------------------------------------

let refreshing = false;
let refreshTimer = 0;

// Fetches /v1/cluster; resolves to whether it arrived.
async function refresh() {
  if (refreshing || state.authNeeded)
    return false;
  refreshing = true;
  const asked = performance.now();
  try {
    const res = await api("/v1/cluster");
    if (!res.ok) {
      setFacts(`/v1/cluster: ${await errorText(res)}`);
      return false;
    }
    const snap = await res.json();
    for (const k of ["nodes", "devices", "links", "thermal", "jobs", "models", "stages"])
      state.cluster[k] = Array.isArray(snap?.[k]) ? snap[k] : [];
    state.cluster.node = String(snap?.node ?? "");
    state.cluster.coordinator = String(snap?.coordinator ?? "");
    state.loaded = true;
    const running = new Set();
    for (const j of state.cluster.jobs) {
      if (!Number.isFinite(j?.job))
        continue;
      noteJob(j);
      running.add(j.job);
    }
    // A job gone from the snapshot has ended; its event may have been missed.
    for (const job of state.jobs.values()) {
      if (job.state === "running" && !running.has(job.job) && job.updated < asked)
        endJob(job, "ended");
    }
    scheduleRender();
    return true;
  } catch (err) {
    if (!(err instanceof Unauthorized))
      setFacts(`gateway unreachable (${err.message})`);
    return false;
  } finally {
    refreshing = false;
  }
}

// A refresh soon, for events that change more than they carry.
function refreshSoon() {
  if (!refreshTimer) {
    refreshTimer = setTimeout(() => {
      refreshTimer = 0;
      refresh();
    }, 300);
  }
}

// ---- jobs -----------------------------------------------------------------

function noteJob(j) {
  const now = performance.now();
  let job = state.jobs.get(j.job);
  if (!job) {
    job = { job: j.job, model: "", tokens: 0, state: "running", stages: [],
            cancelling: false, samples: [], first: null, updated: now };
    state.jobs.set(j.job, job);
  }
  if (j.model)
    job.model = j.model;
  if (Array.isArray(j.stages) && j.stages.length)
    job.stages = j.stages;
  if (typeof j.cancelling === "boolean")
    job.cancelling = j.cancelling;
  // The node that backs the job up ("" none), and whether it holds what a
  // takeover needs (the model, the draft).
  if (typeof j.backup === "string")
    job.backup = j.backup;
  if (typeof j.backup_ready === "boolean")
    job.backupReady = j.backup_ready;
  // How long the job ran, as the coordinator measured it (an ended job's
  // average needs no samples of ours).
  if (Number.isFinite(j.seconds))
    job.seconds = j.seconds;
  // Tokens only grow; a snapshot asked for before the last event is older.
  if (Number.isFinite(j.tokens) && j.tokens >= job.tokens) {
    job.tokens = j.tokens;
    const sample = [now, j.tokens];
    job.first ??= sample;
    job.samples.push(sample);
    while (job.samples.length > 2 && job.samples[0][0] < now - RATE_WINDOW_MS)
      job.samples.shift();
  }
  job.updated = now;
  if (j.state && j.state !== "running")
    endJob(job, j.state);
  trimJobs();
}

function endJob(job, how) {
  if (job.state !== "running" && how === "ended")
    return;
  job.state = how;
  job.ended ??= performance.now();
}

// All running jobs and the newest ended ones, MAX_JOBS in all.
function trimJobs() {
  const ids = [...state.jobs.keys()].sort((a, b) => a - b);
  for (const id of ids) {
    if (state.jobs.size <= MAX_JOBS)
      break;
    if (state.jobs.get(id).state !== "running")
      state.jobs.delete(id);
  }
}

// Tokens/s over the last RATE_WINDOW_MS while running; the average over
// what was seen once ended.
function tokenRate(job) {
  if (job.state !== "running" && job.seconds > 0)
    return job.tokens / job.seconds;
  const last = job.samples.at(-1);
  let from = job.state === "running" ? job.samples[0] : job.first;
  if (!last || !from || last[0] - from[0] < 200)
    return null;
  if (job.state === "running" && performance.now() - last[0] > RATE_WINDOW_MS)
    return 0;
  return (last[1] - from[1]) * 1000 / (last[0] - from[0]);
}

// ---- live events ----------------------------------------------------------

let socket = null;
let backoff = 500;
let retryTimer = 0;

function connectEvents() {
  if (socket || state.authNeeded)
    return;
  clearTimeout(retryTimer);
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://`
    + `${location.host}/v1/events`;
  const protocols = token() ? ["exo.v1", `bearer.${token()}`] : ["exo.v1"];
  const ws = new WebSocket(url, protocols);
  socket = ws;
  ws.addEventListener("open", () => {
    backoff = 500;
    setLive("on", "events: live");
    refreshSoon();
  });
  ws.addEventListener("message", msg => {
    let ev;
    try {
      ev = JSON.parse(msg.data);
    } catch {
      logEvent({ type: "error", time_ms: Date.now(),
                 data: { detail: "an event that is not JSON" } });
      return;
    }
    onEvent(ev);
  });
  ws.addEventListener("close", () => {
    if (socket !== ws)
      return;
    socket = null;
    if (state.authNeeded)
      return;
    setLive("down", `events: retry in ${(backoff / 1000).toFixed(1)} s`);
    retryTimer = setTimeout(connectEvents, backoff);
    backoff = Math.min(backoff * 2, 15000);
  });
}

function closeEvents() {
  clearTimeout(retryTimer);
  const ws = socket;
  socket = null;
  ws?.close();
  setLive("", "events: off");
}

function upsert(list, match, value) {
  const i = list.findIndex(match);
  if (i >= 0)
    list[i] = { ...list[i], ...value };
  else
    list.push(value);
}

// Whether an event carries what identifies its subject.
function wellFormed(type, d) {
  const str = x => typeof x === "string" && x !== "";
  switch (type) {
    case "node": return str(d.name);
    case "device": return str(d.node) && str(d.id);
    case "thermal": return str(d.node) && str(d.device);
    case "job": return Number.isFinite(d.job);
    case "placement": return Number.isFinite(d.job) && Array.isArray(d.stages);
    default: return true;
  }
}

function onEvent(ev) {
  const d = ev?.data ?? {};
  const c = state.cluster;
  if (typeof ev?.type !== "string" || typeof d !== "object" || !wellFormed(ev.type, d)) {
    logEvent({ type: "error", time_ms: Date.now(),
               data: { detail: `malformed ${ev?.type} event: ${JSON.stringify(ev).slice(0, 200)}` } });
    return;
  }
  switch (ev?.type) {
    case "node": {
      const { change, ...node } = d;
      upsert(c.nodes, n => n.name === node.name, node);
      refreshSoon();
      break;
    }
    case "device":
      upsert(c.devices, x => x.node === d.node && x.id === d.id, d);
      break;
    case "thermal":
      upsert(c.thermal, x => x.node === d.node && x.device === d.device, d);
      break;
    case "job":
      noteJob(d);
      break;
    case "placement":
      noteJob({ job: d.job, stages: d.stages });
      break;
    default:
      break;
  }
  if (ev?.type !== "thermal" || lastThermal(d) !== d.state)
    logEvent(ev);
  scheduleRender();
}

// Thermal events come every second; the log keeps only state changes.
const thermalSeen = new Map();
function lastThermal(d) {
  const k = deviceKey(d.node, d.device);
  const before = thermalSeen.get(k);
  thermalSeen.set(k, d.state);
  return before;
}

function describe(ev) {
  const d = ev.data ?? {};
  switch (ev.type) {
    case "node":
      return `${d.name} ${d.change ?? ""}: ${d.status}${d.reason ? ` (${d.reason})` : ""}`;
    case "device":
      return `${deviceKey(d.node, d.id)} ${d.state}, ${fmtBytes(d.free_memory)} free`;
    case "thermal":
      return `${deviceKey(d.node, d.device)} ${d.state}`
        + (d.has_temperature ? ` at ${fixed(d.temp_c, 1)} °C` : "");
    case "job":
      return `job ${d.job} ${d.state ?? "?"}: ${d.tokens ?? "?"} tokens (${d.model ?? "?"})`;
    case "placement":
      return `job ${d.job} on ` + (d.stages ?? [])
        .map(st => `${deviceKey(st.node, st.device)} ${st.first_layer}–${st.last_layer}`)
        .join(", ");
    case "audit":
      return `#${d.seq} ${d.event} by ${d.principal || "?"}${d.detail ? `: ${d.detail}` : ""}`;
    default:
      return d.detail ?? JSON.stringify(d);
  }
}

function logEvent(ev) {
  const log = $("events-log");
  const type = String(ev?.type ?? "?");
  log.prepend(h("li", { class: `ev ev-${type}` },
    h("time", { text: fmtTime(ev?.time_ms ?? Date.now()) }),
    h("span", { class: "ev-type", text: type }),
    h("span", { class: "ev-text", text: describe(ev ?? {}) })));
  while (log.children.length > MAX_EVENTS)
    log.lastElementChild.remove();
  state.events++;
  $("events-count").textContent = `${state.events} seen, last ${log.children.length}`;
}

// ---- rendering ------------------------------------------------------------

let renderQueued = false;
function scheduleRender() {
  if (!renderQueued) {
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      render();
    });
  }
}

function render() {
  const c = state.cluster;
  if (state.loaded && !state.authNeeded) {
    const alive = c.nodes.filter(n => n.status === "alive").length;
    setFacts(`serving node ${c.node || "?"} · coordinator ${c.coordinator || "?"}`
      + ` · ${alive}/${c.nodes.length} nodes alive · ${c.devices.length} devices`);
  }
  renderTopology(c);
  renderNodes(c);
  renderStages(c);
  renderJobs();
}

function setFacts(text) {
  $("facts").textContent = text;
}
function setLive(cls, text) {
  $("live").className = `live ${cls}`;
  $("live").textContent = text;
}

// Nodes on a circle (a line for two), links as lines labelled with their
// round trip and bandwidth; the two directions of a pair share one line.
function renderTopology(c) {
  const busy = new Set();
  for (const job of state.jobs.values()) {
    if (job.state === "running")
      job.stages.forEach(st => busy.add(st.node));
  }
  const devs = c.devices.map(d => [d.node, d.id, d.state]);
  const key = JSON.stringify([c.nodes, c.links, c.node, c.coordinator, [...busy], devs]);
  renderInto($("topo"), key, () => {
    const W = 640, H = 300, bw = 170, bh = 78;
    const nodes = [...c.nodes].sort(by(n => n.name));
    const pos = new Map();
    nodes.forEach((n, i) => {
      if (nodes.length === 1)
        return pos.set(n.name, [W / 2, H / 2]);
      const a = -Math.PI / 2 + (2 * Math.PI * i) / nodes.length
        + (nodes.length === 2 ? Math.PI / 2 : 0);
      pos.set(n.name, [W / 2 + Math.cos(a) * (W / 2 - bw / 2 - 14),
                       H / 2 + Math.sin(a) * (H / 2 - bh / 2 - 10)]);
    });
    const pairs = new Map();
    for (const l of c.links) {
      if (!pos.has(l.from) || !pos.has(l.to))
        continue;
      const k = [l.from, l.to].sort().join("\n");
      (pairs.get(k) ?? pairs.set(k, []).get(k)).push(l);
    }
    const lines = [], labels = [];
    for (const [k, ls] of pairs) {
      const [a, b] = k.split("\n");
      const [x1, y1] = pos.get(a), [x2, y2] = pos.get(b);
      // The worse direction of each figure, as placement takes it.
      const p50 = Math.max(...ls.map(l => l.rtt_p50_us));
      const bwps = Math.min(...ls.map(l => l.bandwidth_bps || Infinity));
      const lossy = ls.some(l => l.loss > 0);
      const tip = ls.map(l => `${l.from} → ${l.to}: rtt p50 ${fmtUs(l.rtt_p50_us)}, `
        + `p99 ${fmtUs(l.rtt_p99_us)}, jitter ${fmtUs(l.jitter_us)}, `
        + `loss ${(100 * (l.loss || 0)).toFixed(1)} %, ${fmtRate(l.bandwidth_bps)}`).join("\n");
      lines.push(s("line", { x1, y1, x2, y2, class: `link${lossy ? " lossy" : ""}` },
                   s("title", { text: tip })));
      const text = `${fmtUs(p50)} · ${fmtRate(bwps)}`;
      const mx = (x1 + x2) / 2, my = (y1 + y2) / 2, tw = text.length * 6.4 + 12;
      labels.push(s("g", { class: "link-label" },
        s("rect", { x: mx - tw / 2, y: my - 10, width: tw, height: 20, rx: 10 }),
        s("text", { x: mx, y: my + 4, "text-anchor": "middle", text }),
        s("title", { text: tip })));
    }
    const boxes = nodes.map(n => {
      const [x, y] = pos.get(n.name);
      const roles = [n.name === c.coordinator ? "coordinator" : "",
                     n.name === c.node ? "this node" : ""].filter(Boolean).join(" · ");
      return s("g", { class: `topo-node ${n.status}${busy.has(n.name) ? " busy" : ""}`,
                      "data-testid": `topo-node-${n.name}`,
                      transform: `translate(${x - bw / 2},${y - bh / 2})` },
        s("rect", { width: bw, height: bh, rx: 8 }),
        s("circle", { class: "dot", cx: 14, cy: 17, r: 5 }),
        s("text", { class: "name", x: 26, y: 22, text: n.name }),
        s("text", { class: "sub", x: 12, y: 39, text: `${n.host}:${n.port} · ${n.status}` }),
        s("text", { class: "roles", x: 12, y: 54, text: roles }),
        s("text", { class: "devs", x: 12, y: roles ? 70 : 56 }, c.devices
          .filter(d => d.node === n.name)
          .sort(by(d => d.id))
          .flatMap((d, i) => [i ? s("tspan", { class: "sep", text: " · " }) : null,
                              s("tspan", { class: `d-${d.state}`, text: d.id })])),
        s("title", { text: `${n.name} (incarnation ${n.incarnation})`
                       + (n.reason ? `: ${n.reason}` : "") }));
    });
    return [...lines, ...labels, ...boxes];
  });
  $("topo-note").textContent = c.links.length
    ? "links: rtt p50 · bandwidth (worse direction)" : "no links measured yet";
}

function renderNodes(c) {
  const key = JSON.stringify([c.nodes, c.devices, c.thermal, c.coordinator]);
  renderInto($("nodes"), key, () => {
    if (!c.nodes.length)
      return h("p", { class: "empty", text: state.loaded ? "no nodes"
        : state.authNeeded ? "waiting for an access token" : "loading…" });
    const nodes = [...c.nodes].sort(by(n => n.name));
    return nodes.map(n => h("article",
      { class: `node-card ${n.status}`, "data-testid": `node-${n.name}` },
      h("header", {},
        h("span", { class: "dot" }),
        h("strong", { text: n.name }),
        n.name === c.coordinator ? h("span", { class: "tag", text: "coordinator" }) : null,
        h("span", { class: "muted", text: `${n.status}${n.reason ? ` (${n.reason})` : ""}` })),
      c.devices.filter(d => d.node === n.name)
        .sort(by(d => d.id))
        .map(d => deviceRow(d, c.thermal.find(t => t.node === d.node && t.device === d.id)))));
  });
}

function deviceRow(d, t) {
  const used = Math.max(0, d.total_memory - d.free_memory);
  const frac = d.total_memory > 0 ? Math.min(1, used / d.total_memory) : 0;
  const fill = h("span", { class: `fill${frac > 0.9 ? " high" : ""}` });
  fill.style.width = `${(frac * 100).toFixed(1)}%`;
  let temp = "", thermal = "none", tip = "no temperature reported";
  if (t) {
    thermal = t.state;
    if (t.has_temperature) {
      temp = `${fixed(t.temp_c)} °C`;
      tip = `${fixed(t.temp_c, 1)} °C now, ${fixed(t.predicted_c, 1)} °C predicted, `
        + `limit ${fixed(t.limit_c)} °C`
        + (t.time_to_limit_s >= 0 ? `, at the limit in ${fixed(t.time_to_limit_s)} s` : "");
    }
  }
  return h("div", { class: `device ${d.state}`, "data-testid": `device-${deviceKey(d.node, d.id)}`,
                    title: d.name },
    h("div", { class: "dev-head" },
      h("strong", { text: d.id }),
      h("span", { class: "tag", text: d.backend }),
      d.simulated ? h("span", { class: "tag sim", text: "sim" }) : null,
      h("span", { class: `state s-${d.state}`, text: d.state })),
    h("div", { class: "dev-name", text: d.name }),
    h("div", { class: "mem", title: `${fmtBytes(used)} used of ${fmtBytes(d.total_memory)}` },
      h("span", { class: "bar" }, fill),
      h("span", { class: "mem-text", text: `${fmtBytes(used)} / ${fmtBytes(d.total_memory)}` })),
    h("div", { class: `thermal t-${thermal}`, title: tip },
      h("span", { class: temp ? "temp" : "temp nosensor", text: temp || "no sensor" }),
      h("span", { class: "tstate", text: thermal === "none" ? "" : thermal }),
      t && t.utilization >= 0
        ? h("span", { class: "load", "data-testid": "load",
                      text: `load ${Math.round(t.utilization * 100)}%` })
        : null));
}

// The device stages: the layers of a model on a device, shared by the jobs
// that run them; their KV pool and how full their batches are.
function renderStages(c) {
  const stages = [...c.stages].sort((a, b) =>
    deviceKey(a.node, a.device).localeCompare(deviceKey(b.node, b.device))
    || a.first - b.first);
  renderInto($("stages"), JSON.stringify(stages), () =>
    stages.length ? stages.map(stageRow)
                  : h("p", { class: "empty", text: "no device stage yet" }));
}

function stageRow(s) {
  const n = k => Number.isFinite(s[k]) ? s[k] : 0;
  const paged = n("kv_block_positions") > 0;
  const frac = paged && n("kv_blocks") > 0 ? Math.min(1, n("kv_blocks_used") / n("kv_blocks")) : 0;
  const fill = h("span", { class: `fill${frac > 0.9 ? " high" : ""}` });
  fill.style.width = `${(frac * 100).toFixed(1)}%`;
  const batch = n("forwards") > 0 ? (n("rows") / n("forwards")).toFixed(1) : "–";
  // The mean of the batch-wait histogram (steps that waited at the stage).
  const waits = (Array.isArray(s.wait_counts) ? s.wait_counts : [])
    .reduce((a, c) => a + (Number.isFinite(c) ? c : 0), 0);
  const wait = waits > 0 && Number.isFinite(s.wait_sum_s)
    ? `${(s.wait_sum_s / waits * 1000).toFixed(2)} ms` : "–";
  const where = deviceKey(s.node, s.device);
  return h("article", { class: "stage-row",
                        "data-testid": `stage-${where}/${n("first")}-${n("last")}` },
    h("header", {},
      h("strong", { class: "where", text: where }),
      h("span", { class: "muted", text: `layers ${n("first")}–${n("last") - 1}` }),
      h("span", { class: "muted", text: String(s.model ?? "") })),
    h("div", { class: "stage-figures" },
      h("span", { text: `${n("jobs")} job${n("jobs") === 1 ? "" : "s"}` }),
      h("span", { text: `${n("sequences")} seq` }),
      h("span", { title: "token rows per forward: the mean batch", text: `${batch} rows/fwd` }),
      h("span", { title: "steps that ran with another job's", text: `${n("merged_steps")} merged` }),
      h("span", { title: `mean time a step waited for its batch (${waits} steps)`,
                  text: `wait ${wait}` })),
    h("div", { class: "mem",
               title: paged ? `${n("kv_blocks_used")} of ${n("kv_blocks")} blocks of `
                              + `${n("kv_block_positions")} positions, ${n("kv_blocks_shared")} shared`
                            : "contiguous KV caches" },
      paged ? h("span", { class: "bar" }, fill) : null,
      h("span", { class: "mem-text",
                  text: paged ? `KV ${n("kv_blocks_used")}/${n("kv_blocks")} blocks · ${fmtBytes(n("kv_bytes"))}`
                              : `KV ${fmtBytes(n("kv_bytes"))}` })));
}

function renderJobs() {
  const jobs = [...state.jobs.values()].sort((a, b) => b.job - a.job);
  const key = JSON.stringify(jobs.map(j => [j.job, j.model, j.tokens, j.state, j.stages,
                                            j.cancelling, j.backup, j.backupReady,
                                            rateText(j)]));
  renderInto($("jobs"), key, () => {
    if (!jobs.length)
      return h("p", { class: "empty", text: "no jobs yet; send a chat message" });
    return jobs.map(j => {
      const layers = j.stages.reduce((n, st) => n + st.last_layer - st.first_layer + 1, 0);
      const strip = h("div", { class: "layer-strip" }, j.stages.map((st, i) => {
        const seg = h("span", { class: `seg c${i % 6}`,
                                title: `${deviceKey(st.node, st.device)}: ${fmtLayers(st)}` });
        seg.style.flexGrow = String(st.last_layer - st.first_layer + 1);
        return seg;
      }));
      const shown = j.cancelling && j.state === "running" ? "cancelling" : j.state;
      return h("article", { class: `job ${j.state}`, "data-testid": `job-${j.job}` },
        h("header", {},
          h("strong", { text: `job ${j.job}` }),
          h("span", { class: "muted", text: j.model || "?" }),
          h("span", { class: `state s-${shown}`, text: shown })),
        h("div", { class: "job-figures" },
          h("span", { text: `${j.tokens} tokens` }),
          h("span", { class: "rate", text: rateText(j) }),
          j.backup
            ? h("span", { class: j.state !== "running" ? "backup"
                                 : `backup ${j.backupReady ? "ready" : "pending"}`,
                          "data-testid": "backup",
                          title: j.backupReady
                            ? "the backup holds the model: it takes the job over if its node is lost"
                            : "the backup is still fetching the model",
                          // (whether it was ready matters no more once the job ended)
                          text: j.state === "running"
                            ? `backup ${j.backup} · ${j.backupReady ? "ready" : "fetching"}`
                            : `backup ${j.backup}` })
            : null),
        j.stages.length ? strip : null,
        j.stages.length
          ? h("ol", { class: "stages" }, j.stages.map((st, i) =>
              h("li", { "data-testid": "stage" },
                h("span", { class: `swatch c${i % 6}` }),
                h("span", { class: "where", text: deviceKey(st.node, st.device) }),
                h("span", { class: "muted", text: `${fmtLayers(st)}` }),
                h("span", { class: "muted share",
                            text: layers ? `${Math.round(100 * (st.last_layer - st.first_layer + 1) / layers)} %` : "" }))))
          : h("p", { class: "empty", text: "placement not known yet" }));
    });
  });
}

function rateText(job) {
  const r = tokenRate(job);
  if (r === null)
    return job.state === "running" ? "– tok/s" : "";
  return job.state === "running" ? `${r.toFixed(1)} tok/s` : `avg ${r.toFixed(1)} tok/s`;
}

// ---- chat -----------------------------------------------------------------

const chat = { history: [], abort: null };

async function loadModels() {
  try {
    const res = await api("/v1/models");
    if (!res.ok)
      throw new Error(await errorText(res));
    const list = (await res.json()).data ?? [];
    const select = $("chat-model");
    const keep = select.value;
    select.replaceChildren(...list.map(m => h("option", { value: m.id, text: m.id })));
    if (list.some(m => m.id === keep))
      select.value = keep;
    $("chat-send").disabled = !list.length || chat.abort !== null;
    if (!list.length)
      select.append(h("option", { value: "", text: "no models served" }));
  } catch (err) {
    if (!(err instanceof Unauthorized))
      setFacts(`/v1/models: ${err.message}`);
  }
}

function chatBubble(role, text) {
  const el = h("div", { class: `msg ${role}` }, h("span", { class: "who", text: role }),
               h("div", { class: "body", text }));
  $("chat-log").append(el);
  el.scrollIntoView({ block: "end" });
  return el.querySelector(".body");
}

async function sendChat() {
  const input = $("chat-input");
  const text = input.value.trim();
  const model = $("chat-model").value;
  if (!text || !model || chat.abort)
    return;
  input.value = "";
  chat.history.push({ role: "user", content: text });
  chatBubble("user", text);
  // Only the newest answer carries the test id.
  document.querySelectorAll('[data-testid="chat-answer"]')
    .forEach(el => el.removeAttribute("data-testid"));
  const answer = chatBubble("assistant", "");
  answer.setAttribute("data-testid", "chat-answer");
  answer.dataset.done = "false";
  answer.classList.add("streaming");
  const abort = new AbortController();
  chat.abort = abort;
  $("chat-send").disabled = true;
  $("chat-stop").hidden = false;
  let reply = "";
  try {
    const max = Number($("chat-max").value) || 128;
    const res = await api("/v1/chat/completions", {
      method: "POST", signal: abort.signal,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model, messages: chat.history, stream: true, max_tokens: max }),
    });
    if (!res.ok)
      throw new Error(await errorText(res));
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "", done = false;
    while (!done) {
      const { value, done: eof } = await reader.read();
      if (eof)
        break;
      buf += value;
      const lines = buf.split(/\r?\n/);
      buf = lines.pop();
      for (const line of lines) {
        if (!line.startsWith("data:"))
          continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") {
          done = true;
          break;
        }
        const chunk = JSON.parse(data);
        if (chunk.error)
          throw new Error(chunk.error.message ?? "the stream reported an error");
        const piece = chunk.choices?.[0]?.delta?.content;
        if (piece) {
          reply += piece;
          answer.textContent = reply;
          answer.scrollIntoView({ block: "end" });
        }
      }
    }
    if (!done)
      throw new Error("the stream ended without [DONE]");
    chat.history.push({ role: "assistant", content: reply });
  } catch (err) {
    chat.history.pop();
    answer.dataset.error = "true";
    const why = err instanceof Unauthorized ? "an access token is needed"
      : err.name === "AbortError" ? "stopped" : err.message;
    answer.append(h("div", { class: "chat-error", text: why }));
  } finally {
    answer.classList.remove("streaming");
    answer.dataset.done = "true";
    chat.abort = null;
    $("chat-send").disabled = !$("chat-model").value;
    $("chat-stop").hidden = true;
  }
}

$("chat-form").addEventListener("submit", ev => {
  ev.preventDefault();
  sendChat();
});
$("chat-input").addEventListener("keydown", ev => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    sendChat();
  }
});
$("chat-stop").addEventListener("click", () => chat.abort?.abort());

// ---- start ----------------------------------------------------------------

async function start() {
  if (await refresh()) {
    connectEvents();
    loadModels();
  }
}

takeFragmentToken();
render();
start();
setInterval(() => {
  if (state.authNeeded)
    return;
  if (!state.loaded) {
    start();
    return;
  }
  refresh();
  if (!$("chat-model").options.length)
    loadModels();
}, 2000);
// Rates decay while no tokens come.
setInterval(() => {
  if ([...state.jobs.values()].some(j => j.state === "running"))
    scheduleRender();
}, 1000);
