// humpyard operator console: the Usage view (requests, tokens, cost and errors over
// time, per key, route, target or provider, from GET /v1/stats?series=...) and the
// search of decisions by request id. Same rules as console.js: server data reaches
// the page only as text, and charts are plain SVG drawn here.
"use strict";

// -- Search of decisions by request id (the Decisions view) ---------------------------

(() => {
  const {h, clear, $, name, badge, ms, clock, api} = HY;
  const OUTCOME_KIND = {ok: "ok", failed: "bad", stream_broken: "bad"};

  // One decision, opened, above the list; a 404 (no such id, or another key's) says so.
  async function find() {
    const id = new FormData($("#decision-search")).get("request_id").trim();
    const out = clear($("#decision-found"));
    out.hidden = !id;
    $("#decision-search-clear").hidden = !id;
    if (!id) return;
    try {
      const d = await api("GET", "/v1/decisions/" + encodeURIComponent(id));
      out.append(h("div", {class: "card found", dataset: {requestId: d.request_id || ""}},
        h("header", null, h("strong", null, "Request "), name(d.request_id), " ",
          badge(d.outcome || "?", OUTCOME_KIND[d.outcome] || "warn"), " ",
          h("span", {class: "muted"}, clock(d.ts), " · route ", name(d.route), " · served by ",
            name(d.target ? d.target + (d.provider ? " @ " + d.provider : "") : "—"), " · ", ms(d.latency_ms))),
        HY.decisionDetail(d)));
    } catch (e) {
      out.append(h("p", {class: "muted not-found"}, e.status === 404
        ? "No decision " + id + " (or not one this key may read)." : (e.describe ? e.describe() : String(e))));
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("#decision-search").addEventListener("submit", (e) => { e.preventDefault(); find(); });
    $("#decision-search-clear").addEventListener("click", () => {
      $("#decision-search").reset();
      find();
    });
  });
})();

// -- Usage over time -------------------------------------------------------------------

(() => {
  const {h, svg, clear, $, num, api, query} = HY;
  const MAX_GROUPS = 6;  // the busiest; the rest are summed as "other"
  const usd = (v) => "$" + (v > 0 && v < 0.01 ? v.toPrecision(2) : v.toFixed(2));
  const compact = (v) => (v >= 1e6 ? (v / 1e6).toFixed(1) + "M" : v >= 1e4 ? (v / 1e3).toFixed(0) + "k" : num(v));
  const MEASURES = [
    {title: "Requests", pick: (p) => p.requests, fmt: num},
    {title: "Tokens (input + output)", pick: (p) => p.input_tokens + p.output_tokens, fmt: compact},
    {title: "Cost", pick: (p) => p.cost_usd, fmt: usd},
    {title: "Errors", pick: (p) => p.failures, fmt: num},
  ];

  function params() {
    const f = $("#usage-form").elements;
    const [series, windowSecs] = f.span.value.split(":");
    return {group_by: f.group_by.value, key: f.key.value.trim(), series, window_secs: windowSecs};
  }

  // Every bucket start in the window, oldest first (UTC hours or days, as the API buckets them).
  function buckets(step, windowSecs, now) {
    const out = [];
    for (let t = Math.floor((now - windowSecs) / step) * step; t <= now; t += step) out.push(t);
    return out;
  }

  // The busiest groups, each as {name, points: Map(t -> point)}, the rest summed as "other".
  function lines(groups) {
    const sorted = groups.slice().sort((a, b) => (b.requests || 0) - (a.requests || 0));
    const out = sorted.slice(0, MAX_GROUPS).map((g) => ({
      name: g.key === null || g.key === undefined ? "(none)" : String(g.key),
      points: new Map((g.series || []).map((p) => [p.t, p]))}));
    const rest = sorted.slice(MAX_GROUPS);
    if (rest.length) {
      const points = new Map();
      for (const g of rest) {
        for (const p of g.series || []) {
          const sum = points.get(p.t) || {t: p.t, requests: 0, failures: 0, cost_usd: 0, input_tokens: 0,
                                           output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0};
          for (const k of Object.keys(sum)) if (k !== "t") sum[k] += p[k] || 0;
          points.set(p.t, sum);
        }
      }
      out.push({name: "other (" + rest.length + ")", points});
    }
    return out;
  }

  function stamp(t, step) {
    const iso = new Date(t * 1000).toISOString();
    return step >= 86400 ? iso.slice(5, 10) : iso.slice(11, 16);
  }

  // One stacked column chart: a column per bucket, a segment per group.
  function columns(measure, series, times, step, width) {
    const W = width, H = 170, left = 56, bottom = 22, top = 8;
    const plotW = W - left - 6, plotH = H - top - bottom;
    const totals = times.map((t) => series.reduce((s, g) => s + (g.points.has(t) ? measure.pick(g.points.get(t)) || 0 : 0), 0));
    const max = Math.max(...totals, 0);
    const scale = max > 0 ? plotH / max : 0;
    const colW = plotW / times.length;
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", height: H, role: "img",
                             "aria-label": measure.title, class: "chart usage",
                             dataset: {total: String(totals.reduce((a, b) => a + b, 0))}});
    root.append(svg("line", {x1: left, x2: W - 6, y1: top + plotH, y2: top + plotH, class: "axis"}),
                svg("text", {x: left - 6, y: top + 10, "text-anchor": "end", class: "label"}, measure.fmt(max)),
                svg("text", {x: left - 6, y: top + plotH, "text-anchor": "end", class: "label"}, measure.fmt(0)));
    const every = Math.max(1, Math.ceil(times.length / Math.max(2, Math.floor(plotW / 60))));
    times.forEach((t, i) => {
      const x = left + i * colW;
      let y = top + plotH;
      series.forEach((g, gi) => {
        const p = g.points.get(t);
        const v = p ? measure.pick(p) || 0 : 0;
        if (v <= 0) return;
        const hgt = Math.max(v * scale, 1);
        y -= hgt;
        root.append(svg("rect", {x: (x + colW * 0.12).toFixed(1), y: y.toFixed(1), width: (colW * 0.76).toFixed(1),
                                 height: hgt.toFixed(1), class: "seg s" + gi, dataset: {group: g.name, t: String(t)}},
          svg("title", null, g.name + " · " + stamp(t, step) + " UTC: " + measure.fmt(v))));
      });
      if (i % every === 0) {
        root.append(svg("text", {x: (x + colW / 2).toFixed(1), y: H - 6, "text-anchor": "middle", class: "label"},
                        stamp(t, step)));
      }
    });
    return h("figure", {class: "card chart-card usage-card"}, h("figcaption", null, measure.title, " ",
      h("span", {class: "muted"}, "· " + measure.fmt(totals.reduce((a, b) => a + b, 0)) + " in the window")), root);
  }

  function legend(series) {
    return h("ul", {class: "legend"}, series.map((g, i) =>
      h("li", null, h("span", {class: "swatch s" + i}), HY.name(g.name))));
  }

  function render(data, p) {
    const out = clear($("#usage-charts"));
    const groups = data.groups || [];
    const scope = data.key ? "key " + data.key + ", " : "";
    out.append(h("p", {class: "muted usage-scope"}, scope + "per " + data.group_by + ", " +
      (p.series === "day" ? "daily" : "hourly") + " buckets (UTC)"));
    if (!groups.length) {
      out.append(h("p", {class: "muted"}, "No requests in this window."));
      return;
    }
    const step = p.series === "day" ? 86400 : 3600;
    const times = buckets(step, Number(p.window_secs), Date.now() / 1000);
    const series = lines(groups);
    const width = Math.max(280, Math.min(1100, (out.clientWidth || 600) - 28));
    out.append(legend(series), h("div", {class: "usage-grid"},
      MEASURES.map((m) => columns(m, series, times, step, width > 700 ? Math.floor(width / 2) - 8 : width))));
  }

  HY.register("usage", {
    every: 30000,
    setup() {
      $("#usage-form").addEventListener("submit", (e) => { e.preventDefault(); HY.refresh(); });
      $("#usage-form").addEventListener("change", (e) => { if (e.target.tagName === "SELECT") HY.refresh(); });
    },
    async refresh() {
      const p = params();
      render(await api("GET", "/v1/stats" + query(p)), p);
    },
  });
})();
