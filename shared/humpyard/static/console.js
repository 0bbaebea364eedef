// humpyard operator console: shared helpers, the key, tabs and polling, and the
// "Routes" and "Decisions" views. views.js adds Overrides, Explain and Quota;
// usage.js the Usage view and the search of decisions by request id.
//
// Rules this file keeps: server data only ever reaches the page as text
// (textContent, attribute values), never as markup; the API key lives in
// sessionStorage and travels only in the Authorization header.
"use strict";

const HY = (() => {
  const KEY_STORE = "humpyard.key";
  // The page is served at <base>/ui; the API lives at <base>/v1 (a stage prefix survives).
  const BASE = location.pathname.replace(/\/ui\/?$/, "");
  const views = {};
  let current = null;
  let timer = null;

  // -- DOM helpers -----------------------------------------------------------

  // h("td", {class: "x"}, "text", child, [more]) builds an element; strings become text nodes.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function svg(tag, attrs, ...children) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
      else if (name === "dataset") Object.assign(el.dataset, value);
      else el.setAttribute(name, value === true ? "" : String(value));
    }
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  // A name from the configuration or a request (route, target, provider, model, key...):
  // one line, cut with an ellipsis where it does not fit, the whole name on hover
  // (the title). `tag` lets a flex or grid item carry it itself (docs/ui.md, "Long names").
  function name(text, tag = "span", cls = "") {
    const s = text === null || text === undefined || text === "" ? "—" : String(text);
    return h(tag, {class: "name" + (cls ? " " + cls : ""), title: s}, s);
  }

  // Free text that may be long (an upstream's error, a reason): four lines at most, all of it on hover.
  function clamped(text, tag = "div", cls = "") {
    const s = text === null || text === undefined || text === "" ? "—" : String(text);
    return h(tag, {class: "clamp" + (cls ? " " + cls : ""), title: s.length > 200 ? s : null}, s);
  }

  function badge(text, kind) {
    return h("span", {class: "badge " + (kind || "")}, text);
  }

  function show(el, message) {
    if (!el) return;
    el.textContent = message || "";
    el.hidden = !message;
  }

  // -- formatting --------------------------------------------------------------

  function duration(ms) {
    if (!(ms > 0)) return "0s";
    const s = Math.ceil(ms / 1000);
    if (s < 60) return s + "s";
    const pad = (n) => String(n).padStart(2, "0");
    if (s < 3600) return Math.floor(s / 60) + "m " + pad(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + pad(Math.floor(s / 60) % 60) + "m";
    return Math.floor(s / 86400) + "d " + pad(Math.floor(s / 3600) % 24) + "h";
  }

  function clock(tsSecs) {
    if (typeof tsSecs !== "number") return "—";
    const d = new Date(tsSecs * 1000);
    const today = new Date().toDateString() === d.toDateString();
    return today ? d.toLocaleTimeString() : d.toLocaleString();
  }

  function ms(value) {
    if (typeof value !== "number") return "—";
    return value >= 1000 ? (value / 1000).toFixed(2) + " s" : Math.round(value) + " ms";
  }

  function num(value, digits = 2) {
    if (typeof value !== "number") return value === null || value === undefined ? "—" : String(value);
    return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  }

  // A live countdown: the ticker rewrites its text every second from the deadline.
  function countdown(remainingMs, doneText) {
    const el = h("span", {class: "tick", dataset: {deadline: String(Date.now() + (remainingMs || 0)),
                                                  done: doneText || "0s"}});
    tickOne(el, Date.now());
    return el;
  }

  function tickOne(el, now) {
    const left = Number(el.dataset.deadline) - now;
    el.textContent = left > 0 ? duration(left) : el.dataset.done;
  }

  function tick() {
    const now = Date.now();
    for (const el of $$(".tick")) tickOne(el, now);
  }

  // -- any JSON value as readable elements (for fields this page does not know) --

  function value(v, depth = 0) {
    if (v === null || v === undefined) return h("span", {class: "muted"}, "—");
    if (typeof v === "boolean") return document.createTextNode(v ? "yes" : "no");
    // A string without spaces is a name or an id: kept to one line. Text with spaces wraps.
    if (typeof v === "string" && v && !/\s/.test(v)) return name(v);
    if (typeof v === "string" && v.length > 300) return clamped(v, "span");
    if (typeof v !== "object") return document.createTextNode(String(v));
    if (depth > 4) return h("code", null, JSON.stringify(v));
    if (Array.isArray(v)) {
      if (!v.length) return h("span", {class: "muted"}, "none");
      if (v.every((x) => x === null || typeof x !== "object")) {
        const joined = v.map((x) => (x === null ? "—" : String(x))).join(", ");
        return v.some((x) => typeof x === "string" && x.length > 40) ? name(joined)
          : document.createTextNode(joined);
      }
      if (v.every((x) => x && typeof x === "object" && !Array.isArray(x))) return table(v, depth);
      return h("ol", {class: "plain"}, v.map((x) => h("li", null, value(x, depth + 1))));
    }
    const keys = Object.keys(v);
    if (!keys.length) return h("span", {class: "muted"}, "none");
    return h("dl", {class: "kv"}, keys.map((k) => [h("dt", null, k), h("dd", null, value(v[k], depth + 1))]));
  }

  function table(rows, depth = 0, columns = null) {
    const cols = columns || [...new Set(rows.flatMap((r) => Object.keys(r)))];
    return h("div", {class: "scroll"}, h("table", {class: "data compact"},
      h("thead", null, h("tr", null, cols.map((c) => h("th", null, c)))),
      h("tbody", null, rows.map((r) => h("tr", null, cols.map((c) => h("td", null, value(r[c], depth + 1))))))));
  }

  // Every field of `obj` not in `known`, as a definition list (or nothing).
  function extras(obj, known, title) {
    const rest = Object.keys(obj || {}).filter((k) => !known.has(k));
    if (!rest.length) return null;
    const picked = Object.fromEntries(rest.map((k) => [k, obj[k]]));
    return h("details", {class: "extras"}, h("summary", null, title || "Other fields"), value(picked));
  }

  // -- the API -------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message, body) {
      super(message);
      this.status = status;
      this.body = body;
    }
    describe() {
      return (this.status ? "HTTP " + this.status + ": " : "") + this.message;
    }
  }

  async function api(method, path, body) {
    const headers = {Accept: "application/json"};
    const key = sessionStorage.getItem(KEY_STORE);
    if (key) headers.Authorization = "Bearer " + key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetch(BASE + path, {method, headers, cache: "no-store", credentials: "same-origin",
                                       body: body === undefined ? undefined : JSON.stringify(body)});
    } catch (e) {
      throw new ApiError(0, "the gateway did not answer (" + e.message + ")");
    }
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!resp.ok) {
      const message = (data && data.error && data.error.message) || text.slice(0, 300) || resp.statusText;
      if (resp.status === 401) keyState(key ? "the gateway rejected this key" : "the gateway wants a key", "bad");
      throw new ApiError(resp.status, message, data);
    }
    if ($("#key-state").classList.contains("bad")) describeKey();
    return data;
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) q.set(k, v);
    const s = q.toString();
    return s ? "?" + s : "";
  }

  // -- the key -------------------------------------------------------------------

  function keyState(text, kind) {
    const el = $("#key-state");
    el.textContent = text;
    el.className = "key-state " + (kind || "");
  }

  function describeKey() {
    keyState(sessionStorage.getItem(KEY_STORE) ? "key set for this tab" : "no key", "");
  }

  function setupKey() {
    const form = $("#key-form");
    const input = $("#key-input");
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const key = input.value.trim();
      input.value = "";
      if (key) sessionStorage.setItem(KEY_STORE, key);
      describeKey();
      loadConfig();
      refresh();
    });
    $("#key-forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORE);
      input.value = "";
      describeKey();
    });
    describeKey();
  }

  // -- the configuration, shared by every view -----------------------------------

  let config = null;
  const configListeners = [];

  // Fetch /v1/config and tell every listener; errors are thrown only when `raise`.
  async function loadConfig(raise = false) {
    try {
      config = await api("GET", "/v1/config");
    } catch (e) {
      if (raise) throw e;
      return null;
    }
    const info = [config.source, config.digest].filter(Boolean).join(" · ");
    $("#gateway-info").textContent = info;
    $("#gateway-info").title = info;
    const routes = Object.entries(config.routes || {});
    fillList($("#dl-routes"), routes.filter(([, r]) => !r.implicit).map(([n]) => n)
      .concat(routes.filter(([, r]) => r.implicit).map(([n]) => n)));
    for (const fn of configListeners) fn(config);
    return config;
  }

  function fillList(datalist, names) {
    clear(datalist);
    for (const n of names) datalist.append(h("option", {value: n}));
  }

  // -- views, tabs and polling ----------------------------------------------------

  // spec: {refresh: async () => void, every: ms (0: only on demand), setup: () => void}
  function register(name, spec) {
    views[name] = spec;
  }

  function section(name) {
    return $("#view-" + name);
  }

  // One refresh of a view at a time; a refresh asked for meanwhile runs once after it.
  const busy = new Set();
  const again = new Set();

  async function refresh() {
    const name = current;
    const view = views[name];
    if (!view || !view.refresh) return;
    if (busy.has(name)) { again.add(name); return; }
    busy.add(name);
    const sec = section(name);
    try {
      await view.refresh(sec);
      show($(".view-error", sec), "");
      const stamp = $(".updated", sec);
      if (stamp) stamp.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      show($(".view-error", sec), e instanceof ApiError ? e.describe() : String(e));
      if (!(e instanceof ApiError)) console.error(e);
    } finally {
      busy.delete(name);
    }
    if (again.delete(name) && current === name) await refresh();
  }

  function schedule() {
    clearInterval(timer);
    const view = views[current];
    const every = view && (typeof view.every === "function" ? view.every() : view.every);
    if (every > 0) timer = setInterval(() => { if (!document.hidden) refresh(); }, every);
  }

  function activate() {
    const wanted = location.hash.replace(/^#/, "");
    const name = views[wanted] ? wanted : "routes";
    current = name;
    for (const sec of $$(".view")) sec.hidden = sec.dataset.view !== name;
    for (const a of $$(".tabs a")) a.setAttribute("aria-selected", String(a.dataset.tab === name));
    refresh();
    schedule();
  }

  function start() {
    setupKey();
    for (const [name, view] of Object.entries(views)) {
      if (view.setup) view.setup(section(name));
      const btn = $(".refresh", section(name));
      if (btn) btn.addEventListener("click", refresh);
    }
    window.addEventListener("hashchange", activate);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
    setInterval(tick, 1000);
    loadConfig().then(activate);
  }

  return {h, svg, clear, $, $$, name, clamped, badge, show, duration, clock, ms, num, countdown, value, table,
          extras, api, query, ApiError, register, refresh, schedule, start, fillList,
          config: () => config, loadConfig, onConfig: (fn) => configListeners.push(fn)};
})();

// -- Routes and targets -----------------------------------------------------------

(() => {
  const {h, clear, $, name, badge, countdown, ms, api} = HY;
  const STATE_KIND = {healthy: "ok", cooling_down: "bad", probing: "warn"};

  function endpointItem(ep) {
    const bits = [name(ep.provider + "/" + ep.model, "span", "ep-name"),
                  badge((ep.state || "unknown").replace("_", " "), STATE_KIND[ep.state] || "")];
    if (ep.state === "cooling_down") {
      bits.push(h("span", {class: "cooldown"}, "retry in ", countdown(ep.cooldown_remaining_ms, "now"),
                  ep.cooldown_source ? " (" + ep.cooldown_source + ")" : ""));
    }
    if (ep.readiness === "not_ready") bits.push(badge("not ready", "bad"));
    else if (ep.readiness === "unknown") bits.push(badge("readiness unknown", ""));
    if (ep.consecutive_failures) bits.push(h("span", {class: "muted"}, ep.consecutive_failures + " failures in a row"));
    return h("li", {class: "endpoint", dataset: {state: ep.state || "", endpoint: ep.provider + "/" + ep.model}}, bits);
  }

  function targetItem(target, tail, cfgTarget, figure, endpoints) {
    const head = [name(target, "strong")];
    const cls = (figure && figure.class) || (cfgTarget && cfgTarget.class);
    if (cls) head.push(badge(cls, "class"));
    if (tail) head.push(badge("tail", "info"));
    if (figure && figure.cold) head.push(badge("cold", "bad"));
    for (const o of (cfgTarget && cfgTarget.overridden_by) || []) {
      head.push(badge(o.kind + " #" + o.override_id, "warn"));
    }
    const latency = figure && typeof figure.current_latency_ms === "number"
      ? ms(figure.current_latency_ms) + " (" + figure.latency_samples + " samples)" : "no latency figure yet";
    head.push(h("span", {class: "muted latency"}, latency));
    return h("li", {class: "target", dataset: {target}},
      h("div", {class: "target-head"}, head),
      endpoints.length ? h("ul", {class: "endpoints"}, endpoints.map(endpointItem))
                       : h("p", {class: "muted"}, "no endpoints reported"));
  }

  // pin_route overrides are not labelled in /v1/config; the card shows them from /v1/overrides.
  function pins(name, overrides) {
    return overrides.filter((o) => o.kind === "pin_route" && o.subject === name && !o.stale).map((o) =>
      h("p", {class: "pin"}, badge("pinned", "warn"), " to ", name(o.target || "?"), " by override #" + o.id +
        (o.reason ? ": " + o.reason : "")));
  }

  function routeCard(routeName, route, config, health, overrides) {
    const figures = Object.fromEntries((health.targets || []).map((t) => [t.target, t]));
    const byTarget = {};
    for (const ep of health.endpoints || []) (byTarget[ep.target] = byTarget[ep.target] || []).push(ep);
    const tail = route.tail || [];
    const names = (route.targets || []).filter((t) => !tail.includes(t)).concat(tail);
    const meta = [badge(route.type || "route", "info")];
    if (route.allowed_classes) meta.push(h("span", {class: "muted"}, "classes: " + route.allowed_classes.join(", ")));
    meta.push(h("span", {class: "muted"}, "fails over on: " +
      (route.fallback_on && route.fallback_on.length ? route.fallback_on.join(", ") : "nothing")));
    for (const tier of ["efficient", "capable"]) {
      if (route[tier]) meta.push(name(tier + ": " + route[tier].join(", "), "span", "muted"));
    }
    if (route.judge) meta.push(name("judge: " + route.judge, "span", "muted"));
    return h("article", {class: "card route", dataset: {route: routeName}},
      h("header", null, name(routeName, "h3"), meta),
      pins(routeName, overrides),
      h("ol", {class: "targets"}, names.map((t) =>
        targetItem(t, tail.includes(t), (config.targets || {})[t], figures[t], byTarget[t] || []))));
  }

  function summary(health) {
    const counts = {healthy: 0, cooling_down: 0, probing: 0};
    let notReady = 0;
    for (const ep of health.endpoints || []) {
      counts[ep.state] = (counts[ep.state] || 0) + 1;
      if (ep.readiness === "not_ready") notReady += 1;
    }
    return [badge(counts.healthy + " healthy", "ok"), badge(counts.cooling_down + " cooling down",
            counts.cooling_down ? "bad" : ""), badge(counts.probing + " probing", counts.probing ? "warn" : ""),
            badge(notReady + " not ready", notReady ? "bad" : "")];
  }

  HY.register("routes", {
    every: 5000,
    async refresh() {
      const [config, health, ovs] = await Promise.all([
        HY.loadConfig(true), api("GET", "/v1/health"),
        api("GET", "/v1/overrides").catch(() => ({overrides: []}))]);
      const overrides = ovs.overrides || [];
      const list = clear($("#routes-list"));
      clear($("#health-summary")).append(...summary(health));
      let routes = Object.entries(config.routes || {}).filter(([, r]) => !r.implicit);
      if (!routes.length) {
        list.append(h("p", {class: "muted"}, "No routes configured: every target is its own route."));
        routes = Object.entries(config.routes || {});
      }
      for (const [name, route] of routes) list.append(routeCard(name, route, config, health, overrides));
    },
  });
})();

// -- Decisions ----------------------------------------------------------------------

(() => {
  const {h, clear, $, name, clamped, badge, ms, num, clock, extras, api, query} = HY;
  const OUTCOME_KIND = {ok: "ok", failed: "bad", stream_broken: "bad"};
  const SHOWN = new Set(["request_id", "ts", "route", "rule", "outcome", "status", "key_id", "target",
    "provider", "latency_ms", "attempts", "excluded_targets", "policy_removed", "incapable_targets",
    "overrides", "cold_targets", "skipped_rules", "fallback_crossed_classes", "error"]);
  const expanded = new Set();
  let older = [];       // rows fetched with "Load older", kept across refreshes
  let cursor = null;
  let auto = true;

  function filters() {
    const f = new FormData($("#decision-filters"));
    return {route: f.get("route").trim(), rule: f.get("rule").trim(), outcome: f.get("outcome").trim(),
            key: f.get("key").trim(), limit: f.get("limit")};
  }

  function attemptsTable(attempts) {
    if (!attempts || !attempts.length) return h("p", {class: "muted"}, "No upstream attempt.");
    const rows = attempts.map((a, i) => {
      const note = [];
      if (a.skipped) note.push("skipped: " + a.skipped);
      if (typeof a.retry_after_ms === "number") note.push("retry after " + ms(a.retry_after_ms));
      if (a.error) note.push(a.error);
      return h("tr", {class: a.failure_class || a.skipped ? "failed" : "ok"},
        h("td", null, String(i + 1)), h("td", null, name(a.target)),
        h("td", null, name((a.provider || "?") + "/" + (a.model || "?"))), h("td", null, a.class || "—"),
        h("td", null, a.status === null || a.status === undefined ? "—" : String(a.status)),
        h("td", null, a.failure_class || "—"), h("td", null, ms(a.latency_ms)),
        h("td", {class: "note"}, clamped(note.join("; "))));
    });
    return h("div", {class: "scroll"}, h("table", {class: "data compact attempts"},
      h("thead", null, h("tr", null, ["#", "Target", "Endpoint", "Class", "Status", "Failure", "Latency", "Note"]
        .map((c) => h("th", null, c)))), h("tbody", null, rows)));
  }

  function removals(d) {
    const items = [];
    const add = (label, list, fmt) => {
      for (const x of list || []) items.push(h("li", null, badge(label, "warn"), " ", fmt(x)));
    };
    const why = (x) => [name(x.target || "?"), x.reason ? ": " + x.reason : ""];
    add("class", d.excluded_targets, why);
    add("policy", d.policy_removed, why);
    add("capability", d.incapable_targets, why);
    add("override", d.overrides, (x) => [why(x), x.id ? " (override #" + x.id + ")" : ""]);
    add("cold", d.cold_targets, (x) => (typeof x === "string" ? [name(x), ": cooling down"] : why(x)));
    add("rule skipped", d.skipped_rules, (x) => [name(x.rule || "?"), " → ", name(x.route || "?"),
                                                 ": key may not use the route"]);
    return items.length ? h("ul", {class: "removals"}, items) : h("p", {class: "muted"}, "Nothing removed.");
  }

  function detail(d) {
    const crossed = d.fallback_crossed_classes;
    return h("div", {class: "detail"},
      d.error ? clamped(d.error, "p", "error-text") : null,
      h("h4", null, "Attempts"), attemptsTable(d.attempts),
      h("h4", null, "Removed before trying"), removals(d),
      h("p", null, "Fallback crossed classes: ",
        h("strong", null, crossed === true ? "yes" : crossed === false ? "no" : "unknown (unclassed target)")),
      h("p", {class: "muted"}, "Request " + d.request_id + " · rule ", name(d.rule), " · key ", name(d.key_id)),
      extras(d, SHOWN, "All other fields"));
  }

  function rows(d) {
    const id = d.request_id;
    const open = expanded.has(id);
    const main = h("tr", {class: "decision" + (open ? " open" : ""), tabindex: "0", "aria-expanded": String(open),
                          dataset: {requestId: id || "", outcome: d.outcome || ""}},
      h("td", null, clock(d.ts)), h("td", null, name(d.route)), h("td", null, name(d.rule)),
      h("td", null, badge(d.outcome || "?", OUTCOME_KIND[d.outcome] || "warn")),
      h("td", null, d.status === undefined || d.status === null ? "—" : String(d.status)),
      h("td", null, name(d.target ? d.target + (d.provider ? " @ " + d.provider : "") : "—")),
      h("td", null, ms(d.latency_ms)), h("td", null, num((d.attempts || []).length)),
      h("td", null, name(d.key_id)));
    const toggle = () => {
      if (expanded.has(id)) expanded.delete(id); else expanded.add(id);
      const next = main.nextElementSibling;
      if (next && next.classList.contains("detail-row")) next.remove();
      else main.after(detailRow(d));
      main.classList.toggle("open");
      main.setAttribute("aria-expanded", String(expanded.has(id)));
    };
    main.addEventListener("click", toggle);
    main.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); } });
    return open ? [main, detailRow(d)] : [main];
  }

  function detailRow(d) {
    return h("tr", {class: "detail-row"}, h("td", {colspan: "9"}, detail(d)));
  }

  let shown = null;  // what the table shows, so an unchanged refresh leaves it (and a selection) alone

  function render(list) {
    const signature = JSON.stringify(list);
    if (signature === shown) return;
    shown = signature;
    const body = clear($("#decisions-table tbody"));
    if (!list.length) {
      body.append(h("tr", null, h("td", {colspan: "9", class: "muted"}, "No decisions match.")));
      return;
    }
    for (const d of list) body.append(...rows(d));
  }

  let first = [];
  HY.decisionDetail = detail;  // usage.js opens a decision found by its id

  HY.register("decisions", {
    every: () => (auto ? 3000 : 0),
    setup(sec) {
      const form = $("#decision-filters");
      const reload = () => { older = []; cursor = null; HY.refresh(); };
      form.addEventListener("submit", (e) => { e.preventDefault(); reload(); });
      form.elements.limit.addEventListener("change", reload);
      form.elements.auto.addEventListener("change", (e) => { auto = e.target.checked; HY.schedule(); });
      $("#decisions-more", sec).addEventListener("click", async () => {
        if (!cursor) return;
        try {
          const page = await api("GET", "/v1/decisions" + query({...filters(), cursor}));
          older = older.concat(page.decisions || []);
          cursor = page.next_cursor || null;
          render(first.concat(older));
          $("#decisions-more").hidden = !cursor;
        } catch (e) {
          HY.show($(".view-error", sec), e.describe ? e.describe() : String(e));
        }
      });
    },
    async refresh() {
      const page = await api("GET", "/v1/decisions" + query(filters()));
      first = page.decisions || [];
      const seen = new Set(first.map((d) => d.request_id));
      older = older.filter((d) => !seen.has(d.request_id));
      if (!older.length) cursor = page.next_cursor || null;
      render(first.concat(older));
      $("#decisions-more").hidden = !cursor;
    },
  });
})();

document.addEventListener("DOMContentLoaded", HY.start);
