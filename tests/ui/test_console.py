"""The operator console end to end: real gateway, fake upstreams, headless Chromium.

Each test serves the gateway with the ``/ui`` routes in front of scripted
upstreams, drives the page as an operator would, and checks what the page
shows against what the gateway does. Screenshots go to ``tests/artifacts/ui``.
"""

from __future__ import annotations

import os
import re
import shutil
import time

from playwright.sync_api import Page, expect

from tests.support.steps import ok, status
from tests.ui.conftest import (
    DOCS_IMG,
    OPS_KEY,
    PHONE,
    VIEWER_KEY,
    chat,
    console_config,
    console_gateway,
    open_console,
    screenshot,
    seconds,
    use_key,
)

BOOM = {"error": {"message": "upstream exploded"}}


def countdown_secs(page: Page, selector: str) -> int:
    return seconds(page.locator(selector).inner_text())


def test_tripped_breaker_shows_a_live_countdown(page, ups):
    a, b, c = ups
    a.script(status(500, BOOM), status(500, BOOM), status(500, BOOM))
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        for _ in range(3):
            assert chat(gw).headers["x-humpyard-target"] == "steady-large"
        open_console(page, gw, "routes")
        alpha = page.locator('li.endpoint[data-endpoint="alpha/small"]')
        expect(alpha.locator(".badge").first).to_have_text("cooling down")
        expect(alpha).to_contain_text("(failures)")
        expect(alpha).to_contain_text("3 failures in a row")
        expect(page.locator('li.target[data-target="fast-small"]')).to_contain_text("cold")
        beta = page.locator('li.endpoint[data-endpoint="beta/large"]')
        expect(beta.locator(".badge")).to_have_text("healthy")
        tick = 'li.endpoint[data-endpoint="alpha/small"] .tick'
        first = countdown_secs(page, tick)
        assert 50 <= first <= 60
        # With /v1/health unreachable the page cannot re-fetch: the countdown ticks on its own.
        page.route("**/v1/health", lambda route: route.abort())
        page.wait_for_timeout(2200)
        later = countdown_secs(page, tick)
        assert later < first
        page.unroute("**/v1/health")

        c.health_status = 503
        assert chat(gw, "backup").status_code == 503
        page.click("#view-routes .refresh")
        gamma = page.locator('li.endpoint[data-endpoint="gamma/spare"]')
        expect(gamma).to_contain_text("not ready")
        expect(page.locator("#view-routes .view-error")).to_be_hidden()
        expect(page.locator("#health-summary")).to_contain_text("1 cooling down")
        screenshot(page, "routes")
        if os.environ.get("HUMPYARD_UPDATE_DOCS_IMG"):
            DOCS_IMG.mkdir(parents=True, exist_ok=True)
            shutil.copy(screenshot(page, "routes"), DOCS_IMG / "console.png")


def test_key_goes_only_in_the_authorization_header(page, ups):
    a, b, c = ups
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        seen: list[tuple[str, str | None]] = []
        page.on("request", lambda r: seen.append((r.url, r.headers.get("authorization"))))
        open_console(page, gw, "routes", key=None)
        expect(page.locator("#key-state")).to_have_text("the gateway wants a key")
        expect(page.locator("#view-routes .view-error")).to_contain_text("HTTP 401")

        use_key(page, OPS_KEY)
        expect(page.locator('article.route[data-route="main"]')).to_be_visible()
        expect(page.locator("#view-routes .view-error")).to_be_hidden()
        expect(page.locator("#key-state")).to_have_text("key set for this tab")
        assert page.locator("#key-input").input_value() == ""
        assert page.evaluate("sessionStorage.getItem('humpyard.key')") == OPS_KEY
        api_calls = [(u, auth) for u, auth in seen if "/v1/" in u]
        assert api_calls and all(OPS_KEY not in u for u, _ in seen)
        assert (f"{gw.url}/v1/health", f"Bearer {OPS_KEY}") in api_calls

        page.reload()  # the key survives a reload of the tab, not the tab itself
        expect(page.locator('article.route[data-route="main"]')).to_be_visible()
        page.click("#key-forget")
        assert page.evaluate("sessionStorage.getItem('humpyard.key')") is None
        expect(page.locator("#key-state")).to_have_text("no key")


def test_override_from_the_form_moves_traffic_until_removed(page, ups):
    a, b, c = ups
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        assert chat(gw).headers["x-humpyard-target"] == "fast-small"
        open_console(page, gw, "overrides")
        expect(page.locator("#overrides-table")).to_contain_text("No active overrides.")
        form = page.locator("#override-form")
        form.locator("select[name=kind]").select_option("disable_target")
        form.locator("input[name=subject]").fill("fast-small")
        form.locator("input[name=reason]").fill("provider maintenance")
        form.locator("select[name=expires_in_secs]").select_option("3600")
        form.locator("button[type=submit]").click()
        expect(form.locator(".form-ok")).to_contain_text("Created override #")

        row = page.locator("tr.override")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("fast-small")
        expect(row).to_contain_text("provider maintenance")
        expect(row).to_contain_text("ops")
        left = countdown_secs(page, "tr.override .expires .tick")
        assert 3500 < left <= 3600
        override_id = row.get_attribute("data-override-id")
        screenshot(page, "overrides")

        r = chat(gw)
        assert r.status_code == 200 and r.headers["x-humpyard-target"] == "steady-large"

        page.click('a[data-tab="routes"]')
        expect(page.locator('li.target[data-target="fast-small"]')).to_contain_text(
            f"disable_target #{override_id}")

        page.click('a[data-tab="overrides"]')
        remove = page.locator(f'button[data-override-id="{override_id}"]')
        remove.click()
        expect(remove).to_have_text("Confirm remove")
        remove.click()
        expect(page.locator("#overrides-table")).to_contain_text("No active overrides.")
        assert chat(gw).headers["x-humpyard-target"] == "fast-small"


def test_override_refusals_show_the_server_message(page, ups):
    a, b, c = ups
    text = console_config(a.url, b.url, c.url)
    with console_gateway(text) as gw:
        open_console(page, gw, "overrides", key=VIEWER_KEY)
        form = page.locator("#override-form")
        form.locator("select[name=kind]").select_option("pin_route")
        expect(form.locator(".subject-label")).to_have_text("Route")
        expect(form.locator("input[name=target]")).to_be_visible()
        form.locator("input[name=subject]").fill("main")
        form.locator("input[name=target]").fill("steady-large")
        form.locator("input[name=reason]").fill("viewers may not do this")
        form.locator("button[type=submit]").click()
        error = form.locator(".form-error")
        expect(error).to_contain_text("HTTP 403")
        expect(error).to_contain_text("manage_overrides")
        assert gw.gw.store.list_overrides(time.time()) == []

    with console_gateway(text, ledger=None) as gw:
        open_console(page, gw, "overrides")
        form.locator("input[name=subject]").fill("fast-small")
        form.locator("input[name=reason]").fill("no ledger here")
        form.locator("button[type=submit]").click()
        expect(error).to_contain_text("HTTP 409")
        expect(error).to_contain_text("[ledger]")


def test_explain_shows_the_selected_route_and_why(page, ups):
    a, b, c = ups
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        open_console(page, gw, "explain")
        form = page.locator("#explain-form")
        form.locator("input[name=model]").fill("main")
        form.locator("input[name=profile]").fill("deep")
        form.locator("textarea[name=tags]").fill("team=infra")
        form.locator("textarea[name=headers]").fill("x-extra: yes")
        form.locator("input[name=prompt_tokens]").fill("1200")
        form.locator("input[name=tools]").check()
        with page.expect_request("**/v1/route/explain") as sent:
            form.locator("button[type=submit]").click()
        assert sent.value.post_data_json == {
            "model": "main", "subagent": False, "stream": False, "tools": True, "images": False,
            "prompt_tokens": 1200,
            "headers": {"x-humpyard-profile": "deep", "x-humpyard-tag-team": "infra",
                        "x-extra": "yes"}}
        result = page.locator("#explain-result")
        expect(result.locator(".selected-route")).to_have_text("steady-large")
        expect(result.locator(".explain-summary")).to_contain_text("deep")
        expect(result.locator(".explain-summary .badge")).to_have_text("ok")
        expect(result.locator("table.rules tr.matched")).to_contain_text("deep")
        served = result.locator('table.targets-table tr[data-target="steady-large"]')
        expect(served).to_contain_text("paid")
        screenshot(page, "explain")

        form.locator("input[name=model]").fill("no-such-model")
        form.locator("input[name=profile]").fill("")
        form.locator("button[type=submit]").click()
        expect(result.locator(".explain-summary .badge")).to_have_text("unknown_model")

        form.locator("textarea[name=headers]").fill("not a header line")
        form.locator("button[type=submit]").click()
        expect(form.locator(".form-error")).to_contain_text("expected name=value")


def test_decisions_filter_open_and_never_render_markup(page, ups):
    a, b, c = ups
    evil = "<img src=x onerror=window.pwned=1> bad field"
    a.script(ok(), status(400, {"error": {"message": evil}}), ok())
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        assert [chat(gw).status_code for _ in range(3)] == [200, 400, 200]
        open_console(page, gw, "decisions")
        rows = page.locator("tr.decision")
        expect(rows).to_have_count(3)

        page.fill("#decision-filters input[name=outcome]", "failed")
        page.click("#decision-filters button[type=submit]")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-outcome", "failed")
        expect(rows.first).to_contain_text("400")
        rows.first.click()
        detail = page.locator("tr.detail-row")
        expect(detail).to_contain_text(evil)
        expect(detail.locator("table.attempts")).to_contain_text("fast-small")
        expect(detail.locator("table.attempts")).to_contain_text("alpha/small")
        assert page.locator("#view-decisions img").count() == 0
        assert page.evaluate("window.pwned") is None

        # Auto-refresh brings a new failure in and keeps the open row open.
        a.script(status(400, {"error": {"message": "second bad request"}}))
        assert chat(gw).status_code == 400
        expect(rows).to_have_count(2, timeout=8000)
        expect(detail).to_have_count(1)
        expect(detail).to_contain_text(evil)
        screenshot(page, "decisions")

        page.fill("#decision-filters input[name=outcome]", "")
        page.fill("#decision-filters input[name=route]", "backup")
        page.click("#decision-filters button[type=submit]")
        expect(page.locator("#decisions-table")).to_contain_text("No decisions match.")


def test_quota_bars_and_stats_charts(page, ups):
    a, b, c = ups
    text = console_config(a.url, b.url, c.url, alpha_extra='quota_source = "opencode-go"')
    with console_gateway(text) as gw:
        # The poller's first poll (no key: a failed read) is written at start; the
        # snapshot below must come after it, not be overwritten by it.
        deadline = time.monotonic() + 5
        while "alpha" not in gw.gw.store.get_quota_snapshots():
            assert time.monotonic() < deadline, "the quota poller never polled"
            time.sleep(0.01)
        now = time.time()
        gw.gw.store.put_quota_snapshot("alpha", {
            "provider": "alpha", "source": "opencode-go", "base_url": a.url,
            "windows": {"rolling": {"percent": 42.0, "status": "ok", "resets_at": now + 3600},
                        "weekly": {"percent": 93.5, "status": "ok", "resets_at": now + 86400 * 3}},
            "fetched_at": now, "polled_at": now, "error": None})
        for _ in range(3):
            chat(gw)
        chat(gw, "backup")
        open_console(page, gw, "quota")
        card = page.locator('article.quota[data-provider="alpha"]')
        expect(card.locator("header .badge")).to_have_text("fresh")
        rolling = card.locator('[data-window="rolling"]')
        expect(rolling).to_contain_text("42% used")
        expect(rolling.locator(".bar")).to_have_attribute("aria-valuenow", "42")
        assert re.search(r"resets in (59m|1h)", rolling.inner_text())
        expect(card.locator('[data-window="weekly"] .fill')).to_have_class(re.compile(r"\bbad\b"))

        charts = page.locator("#stats-charts svg.chart")
        expect(charts).to_have_count(5)
        expect(charts.first).to_contain_text("main")
        expect(charts.first).to_contain_text("backup")
        screenshot(page, "quota")
        page.select_option("#stats-form select[name=group_by]", "target")
        expect(charts.first).to_contain_text("fast-small")


def test_the_stats_show_prompt_cache_hits(page, ups):
    a, b, c = ups
    cached = {"prompt_tokens": 1000, "completion_tokens": 5,
              "prompt_tokens_details": {"cached_tokens": 750}}
    a.script(ok("hi", usage=cached), ok("hi", usage={"prompt_tokens": 1000,
                                                     "completion_tokens": 5}))
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        chat(gw)
        chat(gw)
        open_console(page, gw, "quota")
        chart = page.locator('#stats-charts svg.chart[aria-label="Prompt cache hits"]')
        expect(chart).to_contain_text("main")
        expect(chart).to_contain_text("37.5%")
        expect(chart.locator("title")).to_contain_text(
            "750 of 2000 input tokens read from cache, 0 written")


def test_every_view_fits_a_phone(browser, ups):
    a, b, c = ups
    a.script(status(500, BOOM), status(500, BOOM), status(500, BOOM))
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        with console_gateway(console_config(a.url, b.url, c.url)) as gw:
            for _ in range(3):
                chat(gw)
            open_console(page, gw, "routes")
            expect(page.locator('li.endpoint[data-endpoint="alpha/small"] .tick')).to_be_visible()
            screenshot(page, "routes-phone")
            for tab in ("routes", "decisions", "overrides", "explain", "quota"):
                page.click(f'a[data-tab="{tab}"]')
                expect(page.locator(f"#view-{tab}")).to_be_visible()
                page.wait_for_timeout(300)
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= PHONE["width"], f"{tab} is {width}px wide"
            page.click('a[data-tab="decisions"]')
            page.click("tr.decision >> nth=0")
            expect(page.locator("tr.detail-row table.attempts")).to_be_visible()
            screenshot(page, "decisions-phone")
    finally:
        context.close()
