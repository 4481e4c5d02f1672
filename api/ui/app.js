// agentd console: one page per view of this node, drawn from its API.
// No framework and no build step: the daemon embeds these three files
// and serves them at /ui/. Every value that came from the network is put
// in the page as text (h() below never parses HTML), so an agent's name
// cannot inject markup.
"use strict";

const state = {
  token: sessionStorage.getItem("agentd.token") || "",
  page: "",
  timers: [],
  ws: null,
  wsListeners: new Set(),
  events: [],
  simnet: null,
};

// ---- DOM helpers ----

function h(tag, attrs, ...children) {
  const svg = tag.startsWith("svg:");
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const main = () => document.getElementById("main");

// put replaces el's children with nodes (nested arrays flattened, empty
// strings and nulls dropped, other strings as text).
function put(el, ...nodes) {
  el.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== "" && n !== null && n !== undefined && n !== false));
}

function show(...nodes) {
  put(main(), ...nodes);
}

function badge(text, kind) {
  return h("span", { class: "badge " + (kind || "") }, text);
}

function statusBadge(st) {
  const kind = { HEALTHY: "ok", DEGRADED: "warn", MAINTENANCE: "info", UNHEALTHY: "bad" }[st] || "";
  return badge(st || "-", kind);
}

function stateBadge(v) {
  if (v === "ok") return badge("ok", "ok");
  if (v === "off") return badge("off", "");
  return badge(v, "warn");
}

function errorBox(err) {
  return h("div", { class: "error", role: "alert" }, String(err && err.message ? err.message : err));
}

function ms(ns) {
  if (ns === undefined || ns === null) return "-";
  const v = ns / 1e6;
  return v < 1 ? v.toFixed(3) + " ms" : v < 1000 ? v.toFixed(1) + " ms" : (v / 1000).toFixed(2) + " s";
}

function ago(t) {
  if (!t) return "-";
  const d = (Date.now() - new Date(t).getTime()) / 1000;
  if (d < 0) return "in " + fmtSecs(-d);
  return fmtSecs(d) + " ago";
}

function fmtSecs(s) {
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function short(id) {
  return id && id.length > 16 ? id.slice(0, 8) + "…" + id.slice(-6) : id || "-";
}

function agentLink(id, text) {
  return h("a", { href: "#explain/" + encodeURIComponent(id), class: "mono", title: id }, text || id);
}

function table(head, rows) {
  const thead = head.some((c) => c) ? h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))) : "";
  return h("table", {}, thead, h("tbody", {}, rows));
}

// ---- API ----

async function api(path) {
  const headers = { Accept: "application/json" };
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const r = await fetch("../" + path.replace(/^\//, ""), { headers });
  const text = await r.text();
  let body;
  try { body = text ? JSON.parse(text) : {}; } catch { body = { message: text }; }
  if (!r.ok) {
    const e = new Error((body.error ? body.error + ": " : "") + (body.message || r.statusText) + " (HTTP " + r.status + ")");
    e.status = r.status;
    e.body = body;
    if (r.status === 401) askToken();
    throw e;
  }
  return body;
}

function askToken() {
  const f = document.getElementById("token-form");
  f.hidden = false;
}

// ---- the event stream (WebSocket watch), shared by the pages ----

function connect() {
  if (state.ws) return;
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const url = proto + "//" + location.host + new URL("../ws", location.href).pathname;
  // Browsers cannot set an Authorization header on a WebSocket; the
  // token travels as a subprotocol the daemon reads and never selects
  // (it selects agentd.console: JSON frames, docs/api.md).
  const protocols = ["agentd.console"];
  if (state.token) protocols.push("agentd.bearer." + state.token);
  const ws = new WebSocket(url, protocols);
  state.ws = ws;
  setConn("connecting", "");
  ws.onopen = () => {
    ws.send(JSON.stringify({ type: "watch", heartbeats: false }));
  };
  ws.onmessage = (m) => {
    let f;
    try { f = JSON.parse(m.data); } catch { return; }
    if (f.type === "watching") setConn("live", "ok");
    if (f.type === "error") setConn(f.code || "error", "bad");
    if (f.type !== "event") return;
    state.events.unshift(f);
    if (state.events.length > 500) state.events.length = 500;
    for (const l of state.wsListeners) l(f);
  };
  ws.onclose = () => {
    if (state.ws === ws) state.ws = null;
    setConn("disconnected", "warn");
    setTimeout(() => { if (!state.ws) connect(); }, 3000);
  };
}

function setConn(text, kind) {
  const c = document.getElementById("conn");
  c.textContent = "events: " + text;
  c.className = "badge " + kind;
}

function onEvent(f) {
  state.wsListeners.add(f);
  return () => state.wsListeners.delete(f);
}

// ---- pages ----

function every(ms, f) {
  f();
  state.timers.push(setInterval(f, ms));
}

const pages = {
  async node() {
    const title = h("h1", {}, "This node");
    const body = h("div", {});
    show(title, body);
    every(5000, async () => {
      try {
        const [hz, rz] = await Promise.all([api("healthz"), api("readyz").catch((e) => e.body || { checks: {} })]);
        const card = (k, v) => h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v));
        put(body,
          h("div", { class: "cards", id: "node-cards" },
            card("status", hz.status), card("uptime", fmtSecs(hz.uptime_seconds)), card("peers", hz.peers),
            card("live agents", hz.live_agents), card("hosted", hz.hosted_agents), card("cached records", hz.cached_records),
            card("DHT table", hz.dht_routing_table), card("DHT mode", hz.dht_mode), card("reachability", hz.reachability),
            card("auth", hz.auth)),
          h("h2", {}, "Identity"),
          table(["", ""], [
            h("tr", {}, h("th", {}, "agent_id"), h("td", { class: "mono", id: "node-agent-id" }, hz.agent_id)),
            h("tr", {}, h("th", {}, "peer_id"), h("td", { class: "mono", id: "node-peer-id" }, hz.peer_id)),
            h("tr", {}, h("th", {}, "version"), h("td", {}, hz.version + " (protocol " + hz.protocol_version + ")")),
          ]),
          h("h2", {}, "Transports"),
          table(["transport", "state"], Object.entries(rz.checks || {}).sort().map(([k, v]) =>
            h("tr", {}, h("td", {}, k), h("td", {}, stateBadge(v))))),
          h("h2", {}, "Listen addresses"),
          table(["multiaddr"], (hz.listen || []).map((a) => h("tr", {}, h("td", { class: "mono" }, a)))),
        );
      } catch (e) {
        put(body, errorBox(e));
      }
    });
  },

  async peers() {
    const body = h("div", {});
    show(h("h1", {}, "Peers"), body);
    every(5000, async () => {
      try {
        const pl = await api("peers");
        if (!pl.peers.length) {
          put(body, h("p", { class: "muted", id: "no-peers" }, "No peer connected."));
          return;
        }
        put(body, h("p", { class: "muted" }, pl.total + " connected"), table(
          ["peer", "connection", "direction", "latency", "agents", "addresses", "protocols"],
          pl.peers.map((p) => h("tr", { "data-peer": p.id },
            h("td", { class: "mono", title: p.id }, p.id),
            h("td", {}, badge(p.connection || "-", p.connection === "direct" ? "ok" : "warn")),
            h("td", {}, p.direction || "-"),
            h("td", {}, p.latency_ns ? ms(p.latency_ns) : "-"),
            h("td", {}, (p.agents || []).map((a) => h("div", {}, agentLink(a, short(a))))),
            h("td", { class: "mono" }, (p.addrs || []).join("\n")),
            h("td", {}, h("details", {}, h("summary", {}, (p.protocols || []).length + " protocols"),
              h("div", { class: "mono" }, (p.protocols || []).join("\n"))))))));
      } catch (e) {
        put(body, errorBox(e));
      }
    });
  },

  async agents() {
    const filter = h("input", { placeholder: "filter capabilities", id: "cap-filter", "aria-label": "filter capabilities" });
    const body = h("div", {});
    show(h("h1", {}, "Live view by capability"), h("form", { class: "query", onsubmit: (e) => e.preventDefault() }, filter), body);
    let list = [];
    const draw = () => {
      const groups = new Map();
      for (const e of list) {
        const caps = new Set(Object.keys(e.agent.capabilities || {}));
        for (const s of e.agent.skills || []) for (const c of s.capabilities || []) caps.add(c.id);
        if (!caps.size) caps.add("(none)");
        for (const c of caps) {
          if (!groups.has(c)) groups.set(c, []);
          groups.get(c).push(e);
        }
      }
      const q = filter.value.trim().toLowerCase();
      const names = [...groups.keys()].filter((c) => !q || c.toLowerCase().includes(q)).sort();
      if (!list.length) {
        put(body, h("p", { class: "muted", id: "no-agents" }, "No live agent in this node's view."));
        return;
      }
      put(body, h("p", { class: "muted" }, list.length + " live agents, " + groups.size + " capabilities"),
        names.map((c) => h("div", { class: "group", "data-capability": c }, h("h2", {}, c, " ", badge(String(groups.get(c).length), "info")),
          table(["agent", "agent_id", "status", "source", "heard"], groups.get(c).map((e) =>
            h("tr", { "data-agent": e.agent.agent_id },
              h("td", {}, e.agent.agent_name),
              h("td", {}, agentLink(e.agent.agent_id)),
              h("td", {}, statusBadge(e.status)),
              h("td", {}, e.source, e.agent.peer_id ? "" : " (unbound)"),
              h("td", {}, e.source === "local" ? "hosted here" : fmtSecs((e.age_ms || 0) / 1000) + " ago")))))));
    };
    filter.addEventListener("input", draw);
    const load = async () => {
      try {
        list = (await api("agents?limit=1000")).agents;
        draw();
      } catch (e) {
        put(body, errorBox(e));
      }
    };
    let pending = null;
    state.timers.push({ off: onEvent(() => { clearTimeout(pending); pending = setTimeout(load, 150); }) });
    every(10000, load);
  },

  async events() {
    const hb = h("input", { type: "checkbox", id: "hb" });
    const filter = h("input", { placeholder: "filter: capability or agent id", id: "event-filter", "aria-label": "filter events" });
    const body = h("tbody", { id: "event-rows" });
    const shown = (f) => {
      const q = filter.value.trim().toLowerCase();
      return !q || (f.agent_id || "").toLowerCase().includes(q) || (f.capability || "").toLowerCase().includes(q) ||
        (f.capabilities || []).some((c) => c.toLowerCase().includes(q));
    };
    const draw = () => put(body, ...state.events.filter(shown).map(eventRow));
    filter.addEventListener("input", draw);
    show(h("h1", {}, "Live events"),
      h("p", { class: "muted" }, "Registrations, departures, status and capability changes as the WebSocket watch delivers them (newest first). ",
        h("label", {}, hb, " include heartbeats"), " ", filter),
      h("div", { class: "events" }, h("table", {}, h("thead", {}, h("tr", {}, ["time", "event", "agent", "status", "reason", "capabilities", "source"].map((c) => h("th", {}, c)))), body)));
    hb.addEventListener("change", () => {
      if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ type: "watch", heartbeats: hb.checked }));
    });
    draw();
    state.timers.push({ off: onEvent(draw) });
  },

  async search() {
    const f = queryForm("search-form", [["capability", "capability"], ["skill", "skill"], ["q", "free text"], ["version", "semver constraint"]], "Resolve");
    const out = h("div", { id: "search-out" });
    show(h("h1", {}, "Search"), h("p", { class: "muted" }, "Runs the query through this node's resolver (live view, LAN, DHT, SkillCenter, cache) and shows the path it took."), f.form, out);
    f.onsubmit(async (params) => {
      put(out, h("p", { class: "muted" }, "resolving…"));
      try {
        const ex = await api("explain?" + params);
        put(out, verdict(ex), resolverView(ex), resultsView(ex), refusedOffers(ex), nextList(ex));
      } catch (e) {
        put(out, errorBox(e));
      }
    });
    // #search?capability=… runs at once: a link to a query.
    const hq = hashQuery();
    if (hq) {
      f.fill(hq);
      f.submit();
    }
  },

  async explain(arg) {
    const f = queryForm("explain-form", [["agent_id", "agent id"], ["capability", "capability (optional)"]], "Explain");
    const out = h("div", { id: "explain-out" });
    show(h("h1", {}, "Why can (or can't) this node see an agent?"), f.form, out);
    f.onsubmit(async (params) => {
      put(out, h("p", { class: "muted" }, "asking…"));
      try {
        const ex = await api("explain?" + params);
        put(out, verdict(ex), agentState(ex), heardView(ex), refusalsView(ex), trustView(ex),
          ex.resolver ? resolverView(ex) : "", refusedOffers(ex), nextList(ex));
      } catch (e) {
        put(out, errorBox(e));
      }
    });
    if (arg) {
      f.fill(new URLSearchParams({ agent_id: decodeURIComponent(arg) }));
      f.submit();
    }
  },

  async simnet() {
    const input = h("input", { type: "file", accept: "application/json,.json", id: "simnet-file" });
    const drop = h("div", { class: "drop", id: "simnet-drop" }, "Open the JSON report of ", h("code", {}, "agentd simnet --json report.json"), ": ", input, " or drop it here.");
    const out = h("div", { id: "simnet-out" });
    show(h("h1", {}, "Simnet report"), drop, out);
    const load = async (file) => {
      try {
        state.simnet = JSON.parse(await file.text());
        put(out, simnetView(state.simnet));
      } catch (e) {
        put(out, errorBox("not a simnet report: " + e.message));
      }
    };
    input.addEventListener("change", () => input.files[0] && load(input.files[0]));
    drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
    drop.addEventListener("dragleave", () => drop.classList.remove("over"));
    drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); if (e.dataTransfer.files[0]) load(e.dataTransfer.files[0]); });
    if (state.simnet) put(out, simnetView(state.simnet));
  },
};

function hashQuery() {
  const i = location.hash.indexOf("?");
  return i < 0 ? null : new URLSearchParams(location.hash.slice(i + 1));
}

function queryForm(id, fields, label) {
  const inputs = fields.map(([name, ph]) => h("input", { name, placeholder: ph, "aria-label": name }));
  const local = h("input", { type: "checkbox", name: "local_only" });
  const form = h("form", { class: "query", id },
    fields.map(([name], i) => h("label", {}, name, inputs[i])),
    h("label", {}, "local only", local),
    h("button", { type: "submit" }, label));
  let handler = null;
  const params = () => {
    const p = new URLSearchParams();
    for (const el of inputs) if (el.value.trim()) p.set(el.name, el.value.trim());
    if (local.checked) p.set("local_only", "true");
    return p;
  };
  form.addEventListener("submit", (e) => { e.preventDefault(); if (handler) handler(params()); });
  return {
    form,
    onsubmit: (f) => { handler = f; },
    fill: (p) => { for (const el of inputs) el.value = p.get(el.name) || ""; local.checked = p.get("local_only") === "true"; },
    submit: () => handler && handler(params()),
  };
}

function eventRow(f) {
  return h("tr", { "data-event": f.event, "data-agent": f.agent_id || "" },
    h("td", {}, new Date(f.time).toLocaleTimeString()),
    h("td", {}, f.event),
    h("td", {}, f.agent_id ? agentLink(f.agent_id, short(f.agent_id)) : f.capability || "-"),
    h("td", {}, f.status ? statusBadge(f.status) : "-"),
    h("td", {}, f.reason || f.change || "-"),
    h("td", {}, (f.capabilities && f.capabilities.length ? f.capabilities : f.capability ? [f.capability] : []).join(", ")),
    h("td", {}, f.source || "-"));
}

function verdict(ex) {
  return h("div", { class: "verdict " + ex.verdict, id: "verdict", "data-verdict": ex.verdict }, h("strong", {}, ex.verdict.toUpperCase().replace("_", " ")), " — ", ex.summary);
}

function nextList(ex) {
  if (!ex.next || !ex.next.length) return "";
  return [h("h2", {}, "What to do"), h("ul", { class: "next" }, ex.next.map((n) => h("li", {}, n)))];
}

function resolverView(ex) {
  const r = ex.resolver;
  if (!r) return "";
  const max = Math.max(1, ...r.steps.map((s) => s.took_ns));
  return [h("h2", {}, "Resolver path (" + ms(r.took_ns) + ")"),
    h("div", { class: "steps", id: "steps" }, r.steps.map((s) => {
      const bar = h("div", { class: "bar" });
      bar.style.width = Math.max(0.5, (100 * s.took_ns) / max) + "%";
      return h("div", { class: "step" + (s.name === r.answered_by ? " answered" : ""), "data-step": s.name },
        h("strong", {}, s.name), h("div", {}, bar), h("span", {}, ms(s.took_ns)), h("span", {}, s.found + " found"),
        s.error ? h("div", { class: "note" }, "error: " + s.error) : s.note ? h("div", { class: "note" }, s.note) : "");
    })),
    ex.resolver_error ? h("p", { class: "muted" }, ex.resolver_error) : ""];
}

function resultsView(ex) {
  if (!ex.results || !ex.results.length) return "";
  return [h("h2", {}, "Answer"), table(["agent", "agent_id", "source", "status", "age"], ex.results.map((r) =>
    h("tr", { "data-agent": r.agent_id }, h("td", {}, r.agent_name), h("td", {}, agentLink(r.agent_id)), h("td", {}, r.source + (r.stale ? " (stale)" : "")),
      h("td", {}, statusBadge(r.status)), h("td", {}, ms(r.age_ns)))))];
}

function refusedOffers(ex) {
  if (!ex.refused_offering || !ex.refused_offering.length) return "";
  return [h("h2", {}, "Refused offers of this capability"), table(["agent_id", "last refusal", "detail"], ex.refused_offering.map((e) => {
    const r = e.refusals[e.refusals.length - 1] || {};
    return h("tr", {}, h("td", {}, agentLink(e.agent_id)), h("td", {}, badge(r.reason || "-", "bad"), " ", r.transport || ""), h("td", {}, r.detail || ""));
  }))];
}

function agentState(ex) {
  const rows = [];
  const row = (k, ...v) => rows.push(h("tr", {}, h("th", {}, k), h("td", {}, ...v)));
  if (ex.live) {
    const l = ex.live;
    row("status", statusBadge(l.status), l.local ? " hosted by this node" : "");
    row("source", l.source);
    row("last heard", ago(l.last_heard), " (interval " + ms(l.interval_ns) + ")");
    if (!l.local) {
      row("UNHEALTHY at", new Date(l.unhealthy_at).toLocaleTimeString(), " without news; removed at ", new Date(l.timeout_at).toLocaleTimeString());
      row("peer", h("span", { class: "mono" }, l.peer_id), " ", badge(l.peer_connected ? "connected" : "not connected", l.peer_connected ? "ok" : "warn"));
    }
    row("seq", String(l.seq));
  }
  if (ex.held) row("held", "since " + ago(ex.held.since) + " for peer ", h("span", { class: "mono" }, ex.held.peer_id));
  if (ex.cached) row("cache", ex.cached.source + ", received " + ago(ex.cached.received_at) + ", fresh until " + new Date(ex.cached.expires_at).toLocaleString() + (ex.cached.stale ? " (stale)" : ""));
  if (ex.tombstone) row("unregistered", ago(ex.tombstone.at) + " (" + ex.tombstone.reason + ", seq " + ex.tombstone.seq + ")");
  if (ex.left) row("left the view", ago(ex.left.at) + ": " + ex.left.reason);
  if (ex.mismatched && ex.mismatched.length) row("filters not matched", ex.mismatched.join(", "));
  return rows.length ? [h("h2", {}, "State"), table(["", ""], rows)] : "";
}

function heardView(ex) {
  if (!ex.heard || !ex.heard.length) return "";
  return [h("h2", {}, "Heard (verified)"), table(["transport", "kind", "count", "first", "last", "last seq"], ex.heard.map((x) =>
    h("tr", { "data-transport": x.transport }, h("td", {}, x.transport), h("td", {}, x.kind), h("td", {}, String(x.count)), h("td", {}, ago(x.first)), h("td", {}, ago(x.last)), h("td", {}, String(x.last_seq || "-")))))];
}

function refusalsView(ex) {
  if (!ex.refusals || !ex.refusals.length) return "";
  return [h("h2", {}, "Refused"), table(["when", "transport", "kind", "seq", "reason", "detail"], ex.refusals.slice().reverse().map((r) =>
    h("tr", {}, h("td", {}, ago(r.at)), h("td", {}, r.transport), h("td", {}, r.kind), h("td", {}, String(r.seq || "-")), h("td", {}, badge(r.reason, "bad"), r.count > 1 ? " ×" + r.count : ""), h("td", {}, r.detail))))];
}

function trustView(ex) {
  const t = ex.trust;
  if (!t) return "";
  return [h("h2", {}, "Trust"), table(["policy", "admitted by policy", "key pinned", "certificate"], [h("tr", {},
    h("td", {}, t.policy), h("td", {}, String(t.allowed)), h("td", {}, String(t.key_pinned)), h("td", {}, String(!!t.certificate)))])];
}

// ---- simnet report ----

function simnetView(rep) {
  if (!rep || !rep.scenario || !Array.isArray(rep.timeline)) throw new Error("no scenario or timeline");
  const s = rep.scenario;
  const q = rep.queries || {};
  const lat = (rep.lookup_latency || {}).all || {};
  const g = rep.gossip || {};
  const prop = g.propagation || {};
  const summary = table(["", ""], [
    ["scenario", s.kind + ", " + s.nodes + " nodes, " + s.duration_s + " s, seed " + s.seed + ", " + s.latency_ms + " ms links, scope " + s.scope],
    ["clock", (rep.clock || "-") + (rep.wall_s ? ", " + rep.wall_s.toFixed(1) + " s wall" : "")],
    ["recall", pct(q.recall) + " (stale rate " + pct(q.stale_rate) + ")"],
    ["lookup latency", "p50 " + num(lat.p50_ms) + " ms, p99 " + num(lat.p99_ms) + " ms"],
    ["gossip propagation", "p50 " + num(prop.p50_ms) + " ms, p99 " + num(prop.p99_ms) + " ms, RPC drops " + (g.rpc_drops || 0)],
    ["verdict", rep.failures && rep.failures.length ? "FAIL: " + rep.failures.join("; ") : "pass"],
  ].map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))));
  const series = [
    ["recall", (b) => b.recall, (v) => pct(v)],
    ["stale rate", (b) => b.stale_rate, (v) => pct(v)],
    ["lookup latency (ms)", (b) => b.p50_ms, num, (b) => b.p95_ms, "blue p50, red p95"],
    ["messages per node per s", (b) => b.msgs_per_node_s, num],
    ["bytes out per node per s", (b) => b.bytes_out_per_node_s, num],
    ["heap per node (MB)", (b) => b.heap_per_node_mb, num],
    ["live nodes", (b) => b.live_nodes, num],
  ];
  return [summary, h("div", { class: "charts", id: "simnet-charts" }, series.map(([title, f, fmt, f2, legend]) => chart(title, rep.timeline, f, fmt, f2, legend, rep.events || [])))];
}

function pct(v) { return v === undefined || v === null ? "-" : (100 * v).toFixed(2) + " %"; }
function num(v) { return v === undefined || v === null ? "-" : Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2); }

function chart(title, buckets, f, fmt, f2, legendText, marks) {
  const W = 420, H = 160, L = 64, B = 20, T = 10, R = 8;
  const xs = buckets.map((b) => b.start_s);
  const ys = buckets.map(f).concat(f2 ? buckets.map(f2) : []).filter((v) => typeof v === "number");
  const svg = h("svg:svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": title });
  if (!xs.length || !ys.length) return h("div", { class: "chart" }, h("h3", {}, title), h("p", { class: "muted" }, "no data"));
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  let y0 = Math.min(0, ...ys), y1 = Math.max(...ys);
  if (y1 === y0) y1 = y0 + 1;
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const Y = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - B - T);
  svg.append(h("svg:line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#dde2e8" }), h("svg:line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#dde2e8" }));
  svg.append(h("svg:text", { x: 2, y: T + 8 }, fmt(y1)), h("svg:text", { x: 2, y: H - B }, fmt(y0)),
    h("svg:text", { x: L, y: H - 4 }, x0.toFixed(0) + " s"), h("svg:text", { x: W - R - 30, y: H - 4 }, x1.toFixed(0) + " s"));
  for (const m of marks) {
    if (m.at_s < x0 || m.at_s > x1) continue;
    svg.append(h("svg:line", { x1: X(m.at_s), y1: T, x2: X(m.at_s), y2: H - B, stroke: "#f0c674", "stroke-dasharray": "2 3" }, h("svg:title", {}, m.kind + (m.detail ? ": " + m.detail : ""))));
  }
  const line = (get, color) => {
    const pts = buckets.map((b) => [b.start_s, get(b)]).filter(([, v]) => typeof v === "number").map(([x, y]) => X(x).toFixed(1) + "," + Y(y).toFixed(1));
    if (pts.length) svg.append(h("svg:polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.6 }));
  };
  line(f, "#3b4cca");
  if (f2) line(f2, "#cf222e");
  const legend = legendText ? h("span", { class: "muted" }, " · " + legendText) : "";
  return h("div", { class: "chart", "data-series": title }, h("h3", {}, title, legend), svg);
}

// ---- routing ----

function route() {
  for (const t of state.timers) {
    if (t && t.off) t.off();
    else clearInterval(t);
  }
  state.timers = [];
  const hash = location.hash.replace(/^#/, "") || "node";
  const [name, ...rest] = hash.split("?")[0].split("/");
  const page = pages[name] ? name : "node";
  state.page = page;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === page);
  document.title = "agentd · " + page;
  pages[page](rest.join("/")).catch((e) => show(errorBox(e)));
}

function init() {
  const tf = document.getElementById("token-form");
  tf.addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = document.getElementById("token").value.trim();
    sessionStorage.setItem("agentd.token", state.token);
    tf.hidden = true;
    if (state.ws) {
      const old = state.ws;
      state.ws = null;
      old.close();
    }
    start();
  });
  window.addEventListener("hashchange", () => { if (state.started) route(); });
  // /healthz needs no token; it says whether the rest of the API does.
  api("healthz").then((hz) => {
    if (hz.auth === "bearer" && !state.token) {
      askToken();
      show(h("h1", {}, "Token required"), h("p", { id: "need-token" },
        "This node's API requires a bearer token with the discover:read scope (docs/operations.md, api.jwtSecret). ",
        "Enter it above; it stays in this browser tab's session storage."));
      return;
    }
    start();
  }).catch((e) => show(errorBox(e)));
}

function start() {
  state.started = true;
  connect();
  route();
}

init();
