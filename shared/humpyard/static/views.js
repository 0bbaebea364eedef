// humpyard operator console: the Overrides, Explain and "Quota & stats" views.
// Uses the helpers console.js exposes as HY; server data reaches the page as text only.
"use strict";

// -- Overrides ------------------------------------------------------------------------

(() => {
  const {h, clear, $, name, badge, clock, countdown, api, show, ApiError} = HY;
  const SUBJECT = {disable_target: "Target", drain_provider: "Provider", pin_route: "Route"};

  function describe(e) {
    return e instanceof ApiError ? e.describe() : String(e);
  }

  // A remove button that asks once more before it deletes.
  function removeButton(ov, sec) {
    let armed = null;
    const btn = h("button", {type: "button", class: "danger small", dataset: {overrideId: ov.id}}, "Remove");
    btn.addEventListener("click", async () => {
      if (!armed) {
        btn.textContent = "Confirm remove";
        armed = setTimeout(() => { armed = null; btn.textContent = "Remove"; }, 4000);
        return;
      }
      clearTimeout(armed);
      btn.disabled = true;
      try {
        await api("DELETE", "/v1/overrides/" + encodeURIComponent(ov.id));
        show($(".view-error", sec), "");
        await HY.loadConfig();
        await HY.refresh();
      } catch (e) {
        btn.disabled = false;
        show($(".view-error", sec), describe(e));
      }
    });
    return btn;
  }

  function row(ov, sec) {
    const expires = ov.stale
      ? [badge("stale", "warn"), " ", countdown((ov.expires_in_secs || 0) * 1000, "expired")]
      : [countdown((ov.expires_in_secs || 0) * 1000, "expired")];
    return h("tr", {class: "override" + (ov.stale ? " stale" : ""), dataset: {overrideId: ov.id}},
      h("td", null, "#" + ov.id), h("td", null, ov.kind || "—"), h("td", null, name(ov.subject)),
      h("td", null, name(ov.target)), h("td", {class: "note"}, HY.clamped(ov.reason)),
      h("td", null, name(ov.created_by)), h("td", null, clock(ov.created_at)),
      h("td", {class: "expires", title: ov.stale
        ? "stale: its subject is no longer in the configuration, so it removes nothing" : null}, expires),
      h("td", null, removeButton(ov, sec)));
  }

  // The subject list follows the kind: targets, providers, or (non-implicit) routes.
  function subjects(form) {
    const config = HY.config() || {};
    const kind = form.elements.kind.value;
    $(".subject-label", form).textContent = SUBJECT[kind] || "Subject";
    $(".pin-only", form).hidden = kind !== "pin_route";
    form.elements.target.required = kind === "pin_route";
    const routes = config.routes || {};
    let names = Object.keys(config.targets || {});
    if (kind === "drain_provider") names = Object.keys(config.providers || {});
    if (kind === "pin_route") names = Object.keys(routes).filter((r) => !routes[r].implicit);
    HY.fillList($("#dl-subjects"), names);
    const route = routes[form.elements.subject.value];
    HY.fillList($("#dl-targets"), route ? route.targets || [] : Object.keys(config.targets || {}));
  }

  HY.register("overrides", {
    every: 5000,
    setup(sec) {
      const form = $("#override-form");
      const err = $(".form-error", form);
      const ok = $(".form-ok", form);
      form.elements.kind.addEventListener("change", () => subjects(form));
      form.elements.subject.addEventListener("input", () => subjects(form));
      HY.onConfig(() => subjects(form));
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        show(err, "");
        show(ok, "");
        const f = form.elements;
        const body = {kind: f.kind.value, subject: f.subject.value.trim(), reason: f.reason.value.trim(),
                      expires_in_secs: Number(f.expires_in_secs.value)};
        if (body.kind === "pin_route") body.target = f.target.value.trim();
        const button = $("button[type=submit]", form);
        button.disabled = true;
        try {
          const created = await api("POST", "/v1/overrides", body);
          show(ok, "Created override #" + created.id + ".");
          f.subject.value = "";
          f.target.value = "";
          f.reason.value = "";
          await HY.loadConfig();
          await HY.refresh();
        } catch (ex) {
          show(err, describe(ex));
        } finally {
          button.disabled = false;
        }
      });
    },
    async refresh(sec) {
      const data = await api("GET", "/v1/overrides");
      const body = clear($("#overrides-table tbody"));
      const list = data.overrides || [];
      if (!list.length) body.append(h("tr", null, h("td", {colspan: "9", class: "muted"}, "No active overrides.")));
      for (const ov of list) body.append(row(ov, sec));
    },
  });
})();

// -- Explain ----------------------------------------------------------------------------

(() => {
  const {h, clear, $, name, badge, ms, extras, api, show, ApiError} = HY;
  const REMOVALS = [["excluded_targets", "Excluded by class"], ["ineligible_targets", "Removed by policy or budget"],
                    ["incapable_targets", "Cannot serve this request"], ["overridden_targets", "Removed by an override"],
                    ["health_skipped_targets", "Skipped as unhealthy"]];
  const SHOWN = new Set(["selected", "rules", "targets", "outcome", "message", "model",
                         ...REMOVALS.map(([k]) => k)]);

  // "name=value" (or "name: value") per line → {name: value}; a bad line throws.
  function pairs(text, what) {
    const out = {};
    for (const raw of text.split("\n")) {
      const line = raw.trim();
      if (!line) continue;
      const m = line.match(/^([^=:\s]+)\s*[=:]\s*(.*)$/);
      if (!m) throw new Error(what + ": expected name=value, got " + JSON.stringify(line));
      out[m[1]] = m[2];
    }
    return out;
  }

  function request(form) {
    const f = form.elements;
    const headers = pairs(f.headers.value, "extra headers");
    for (const [name, v] of Object.entries(pairs(f.tags.value, "tags"))) headers["x-humpyard-tag-" + name] = v;
    if (f.profile.value.trim()) headers["x-humpyard-profile"] = f.profile.value.trim();
    const body = {model: f.model.value.trim(), headers, subagent: f.subagent.checked, stream: f.stream.checked,
                  tools: f.tools.checked, images: f.images.checked};
    if (f.prompt_tokens.value !== "") body.prompt_tokens = Number(f.prompt_tokens.value);
    return body;
  }

  function rulesTable(rules) {
    if (!rules || !rules.length) return h("p", {class: "muted"}, "No [[select]] rules: the model names the route.");
    return h("div", {class: "scroll"}, h("table", {class: "data compact rules"},
      h("thead", null, h("tr", null, ["#", "Rule", "Route", "Matched", "Why not", "Key may use route"]
        .map((c) => h("th", null, c)))),
      h("tbody", null, rules.map((r) => h("tr", {class: r.matched ? "matched" : ""},
        h("td", null, String(r.index)), h("td", null, name(r.label || r.name)), h("td", null, name(r.route)),
        h("td", null, badge(r.matched ? "matched" : "no", r.matched ? "ok" : "")),
        h("td", {class: "note"}, HY.clamped((r.mismatches || []).join("; "))),
        h("td", null, r.key_may_use_route === false ? badge("no", "bad") : "yes"))))));
  }

  const TARGET_SHOWN = new Set(["name", "class", "cold", "tail", "endpoints", "current_latency_ms", "latency_samples"]);

  function targetsTable(targets) {
    if (!targets || !targets.length) return h("p", {class: "muted"}, "No target would be tried.");
    return h("div", {class: "scroll"}, h("table", {class: "data compact targets-table"},
      h("thead", null, h("tr", null, ["#", "Target", "Class", "Endpoints", "Latency", "More"].map((c) => h("th", null, c)))),
      h("tbody", null, targets.map((t, i) => h("tr", {dataset: {target: t.name || ""}},
        h("td", null, String(i + 1)),
        h("td", null, name(t.name || "?"), t.tail ? [" ", badge("tail", "info")] : null, t.cold ? [" ", badge("cold", "bad")] : null),
        h("td", null, t.class || "—"),
        h("td", null, (t.endpoints || []).map((e) => h("div", null, name((e.provider || "?") + "/" + (e.model || "?")), " ",
          badge((e.state || "?").replace("_", " "), e.state === "healthy" ? "ok" : "bad")))),
        h("td", null, typeof t.current_latency_ms === "number" ? ms(t.current_latency_ms) : "—"),
        h("td", null, extras(t, TARGET_SHOWN, "details")))))));
  }

  function removalList(list) {
    return h("ul", {class: "removals"}, list.map((r) => h("li", null,
      typeof r === "object" && r ? [name(r.target || "?", "strong"), r.reason ? ": " + r.reason : "",
        r.override_id ? " (override #" + r.override_id + ")" : ""] : String(r))));
  }

  function render(out, answer) {
    const sel = answer.selected || {};
    const okay = answer.outcome === "ok";
    out.append(h("div", {class: "card explain-summary"},
      h("p", null, "Outcome ", badge(answer.outcome || "?", okay ? "ok" : "bad"),
        answer.message ? HY.clamped(answer.message, "span", "error-text") : null),
      h("dl", {class: "kv"},
        h("dt", null, "Route"), h("dd", {class: "selected-route"}, name(sel.route)),
        h("dt", null, "Rule"), h("dd", null, name(sel.rule)),
        h("dt", null, "Chosen by"), h("dd", null, sel.source || "—"))));
    out.append(h("h3", null, "Targets, in the order they would be tried"), targetsTable(answer.targets));
    for (const [key, title] of REMOVALS) {
      const list = answer[key];
      if (Array.isArray(list) && list.length) out.append(h("h3", null, title), removalList(list));
    }
    out.append(h("h3", null, "Selector rules"), rulesTable(answer.rules));
    const more = extras(answer, SHOWN, "Everything else the planner reported");
    if (more) { more.open = true; out.append(more); }
  }

  HY.register("explain", {
    every: 0,
    setup() {
      const form = $("#explain-form");
      const err = $(".form-error", form);
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        show(err, "");
        const out = clear($("#explain-result"));
        let body;
        try {
          body = request(form);
        } catch (ex) {
          show(err, ex.message);
          return;
        }
        try {
          render(out, await api("POST", "/v1/route/explain", body));
        } catch (ex) {
          show(err, ex instanceof ApiError ? ex.describe() : String(ex));
        }
      });
    },
  });
})();

// -- Quota and stats -----------------------------------------------------------------

(() => {
  const {h, svg, clear, $, badge, duration, ms, num, api, query} = HY;
  const STATE_KIND = {fresh: "ok", stale: "warn", unknown: ""};

  function resets(iso) {
    if (!iso) return "reset time unknown";
    const at = new Date(iso);
    if (isNaN(at)) return "resets " + iso;
    const left = at - Date.now();
    return (left > 0 ? "resets in " + duration(left) : "reset due") + " (" + at.toLocaleString() + ")";
  }

  function windowBar(name, w) {
    const pct = typeof w.percent === "number" ? Math.max(0, Math.min(100, w.percent)) : null;
    const fill = h("div", {class: "fill " + (pct >= 90 || w.status === "rate-limited" ? "bad" : pct >= 70 ? "warn" : "ok")});
    fill.style.width = (pct || 0) + "%";
    return h("div", {class: "quota-window", dataset: {window: name}},
      h("div", {class: "quota-label"}, h("strong", null, name), " ", pct === null ? "—" : num(pct, 1) + "% used",
        w.status && w.status !== "ok" ? [" ", badge(w.status, "bad")] : null),
      h("div", {class: "bar", role: "meter", "aria-valuemin": "0", "aria-valuemax": "100",
                "aria-valuenow": pct === null ? null : String(pct), "aria-label": name}, fill),
      h("div", {class: "muted"}, resets(w.resets_at),
        typeof w.age_secs === "number" ? " · read " + duration(w.age_secs * 1000) + " ago" : ""));
  }

  function providerCard(p) {
    const windows = Object.entries(p.windows || {});
    return h("article", {class: "card quota", dataset: {provider: p.provider || ""}},
      h("header", null, HY.name(p.provider || "?", "h3"), badge(p.state || "unknown", STATE_KIND[p.state] || ""),
        p.source ? h("span", {class: "muted"}, p.source) : null),
      p.reason ? h("p", {class: "muted"}, p.reason) : null,
      windows.length ? windows.map(([name, w]) => windowBar(name, w || {})) : h("p", {class: "muted"}, "No usage windows."));
  }

  // One small horizontal bar chart: a row per group, the value printed at the bar's end;
  // detail(g), when given, is what hovering a row says instead of the value alone.
  function chart(title, groups, pick, fmt, detail) {
    const rowH = 22, labelW = 120, barW = 180, valueW = 80;
    const values = groups.map((g) => (typeof pick(g) === "number" ? pick(g) : 0));
    const max = Math.max(...values, 0) || 1;
    const height = groups.length * rowH + 4;
    const root = svg("svg", {viewBox: `0 0 ${labelW + barW + valueW} ${height}`, width: "100%",
                             role: "img", "aria-label": title, class: "chart"});
    groups.forEach((g, i) => {
      const y = i * rowH + 2;
      const w = Math.max(values[i] / max * barW, values[i] > 0 ? 2 : 0);
      const label = String(g.key === null || g.key === undefined ? "(none)" : g.key);
      root.append(
        svg("text", {x: labelW - 6, y: y + 15, "text-anchor": "end", class: "label"},
            label.length > 17 ? label.slice(0, 16) + "…" : label),
        svg("rect", {x: labelW, y: y + 3, width: w.toFixed(1), height: rowH - 8, rx: 2, class: "bar-rect"}),
        svg("text", {x: labelW + w + 6, y: y + 15, class: "value"}, fmt(pick(g))),
        svg("title", null, label + ": " + (detail ? detail(g) : fmt(pick(g)))));
    });
    return h("figure", {class: "card chart-card"}, h("figcaption", null, title), root);
  }

  function stats(data) {
    const out = clear($("#stats-charts"));
    const groups = (data.groups || []).slice().sort((a, b) => (b.requests || 0) - (a.requests || 0)).slice(0, 20);
    if (!groups.length) {
      out.append(h("p", {class: "muted"}, "No requests in this window."));
      return;
    }
    const pct = (v) => (typeof v === "number" ? (v * 100).toFixed(1) + "%" : "—");
    const usd = (v) => (typeof v === "number" ? "$" + (v < 0.01 && v > 0 ? v.toPrecision(2) : v.toFixed(2)) : "—");
    out.append(
      chart("Requests", groups, (g) => g.requests, (v) => num(v)),
      chart("Failure rate", groups, (g) => g.failure_rate, pct),
      chart("p50 latency", groups, (g) => g.p50_latency_ms, (v) => (typeof v === "number" ? ms(v) : "—")),
      chart("Cost", groups, (g) => g.cost_usd, usd),
      // Cache reads over all input tokens: how much of the prompts a provider's cache served.
      chart("Prompt cache hits", groups, (g) => g.cache_hit_ratio, pct, (g) =>
        pct(g.cache_hit_ratio) + " · " + num(g.cache_read_tokens || 0) + " of " +
        num(g.input_tokens || 0) + " input tokens read from cache, " +
        num(g.cache_write_tokens || 0) + " written"));
  }

  function statsParams() {
    const f = $("#stats-form").elements;
    return {group_by: f.group_by.value, window_secs: f.window_secs.value};
  }

  HY.register("quota", {
    every: 15000,
    setup() {
      $("#stats-form").addEventListener("change", () => HY.refresh());
    },
    async refresh() {
      // Quota is an admin key's (403 to others, who still see their own stats).
      const [quota, data] = await Promise.all([
        api("GET", "/v1/quota").catch((e) => { if (e.status === 403) return {refused: e.describe()}; throw e; }),
        api("GET", "/v1/stats" + query(statsParams()))]);
      const list = clear($("#quota-list"));
      const providers = quota.providers || [];
      if (quota.refused) list.append(h("p", {class: "muted"}, quota.refused));
      else if (!providers.length) list.append(h("p", {class: "muted"}, "No provider has a quota_source."));
      for (const p of providers) list.append(providerCard(p));
      stats(data);
    },
  });
})();
