"""The console's usage over time and its search by request id, in Chromium at 1440
and 390 px, with an admin key and with a plain one (which sees only its own).

The gateway is real (``console_gateway``), the requests go through it to
scripted upstreams, and the page is checked against what the gateway counted.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.steps import ok
from tests.ui.conftest import (
    OPS_KEY,
    PHONE,
    VIEWER_KEY,
    chat,
    console_config,
    console_gateway,
    open_console,
    screenshot,
)

DESKTOP = {"width": 1440, "height": 900}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200}


@pytest.fixture(params=[DESKTOP, PHONE], ids=["1440", "390"])
def sized(browser: Browser, request: pytest.FixtureRequest):
    context = browser.new_context(viewport=request.param)
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error"
           and not msg.text.startswith("Failed to load resource") else None)
    yield tab, request.param["width"]
    context.close()
    assert errors == [], f"script errors in the console: {errors}"


def fits(page: Page, width: int) -> None:
    page.wait_for_timeout(200)
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_usage_over_time_per_key_route_and_target(sized, ups) -> None:
    page, width = sized
    a, b, c = ups
    a.script(*[ok("hi", usage=USAGE) for _ in range(5)])
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        for _ in range(3):
            assert chat(gw, key=OPS_KEY).status_code == 200
        for _ in range(2):
            assert chat(gw, key=VIEWER_KEY).status_code == 200
        open_console(page, gw, "usage")
        charts = page.locator("#usage-charts svg.chart.usage")
        expect(charts).to_have_count(4)
        legend = page.locator("#usage-charts ul.legend")
        expect(legend).to_contain_text("ops")
        expect(legend).to_contain_text("viewer")
        requests = page.locator('#usage-charts svg[aria-label="Requests"]')
        expect(requests).to_have_attribute("data-total", "5")
        tokens = page.locator('#usage-charts svg[aria-label="Tokens (input + output)"]')
        expect(tokens).to_have_attribute("data-total", "6000")
        # this hour's column: a segment per key, each saying what it counts
        expect(requests.locator('rect.seg[data-group="ops"] title')).to_contain_text(": 3")
        expect(requests.locator('rect.seg[data-group="viewer"] title')).to_contain_text(": 2")
        fits(page, width)
        screenshot(page, f"usage-{width}")

        page.select_option("#usage-form select[name=group_by]", "target")
        expect(legend).to_contain_text("fast-small")
        page.select_option("#usage-form select[name=span]", "day:604800")
        expect(page.locator("#usage-charts .usage-scope")).to_contain_text("daily")
        expect(requests).to_have_attribute("data-total", "5")
        page.fill("#usage-form input[name=key]", "viewer")
        page.click("#usage-form button[type=submit]")
        expect(page.locator("#usage-charts .usage-scope")).to_contain_text("key viewer")
        expect(requests).to_have_attribute("data-total", "2")
        fits(page, width)


def test_a_plain_key_sees_its_own_usage_only(sized, ups) -> None:
    page, width = sized
    a, b, c = ups
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        for _ in range(3):
            chat(gw, key=OPS_KEY)
        chat(gw, key=VIEWER_KEY)
        open_console(page, gw, "usage", key=VIEWER_KEY)
        page.select_option("#usage-form select[name=group_by]", "key")
        requests = page.locator('#usage-charts svg[aria-label="Requests"]')
        expect(requests).to_have_attribute("data-total", "1")
        legend = page.locator("#usage-charts ul.legend")
        expect(legend).to_contain_text("viewer")
        expect(legend).not_to_contain_text("ops")
        fits(page, width)


def test_a_decision_is_found_by_its_request_id(sized, ups) -> None:
    page, width = sized
    a, b, c = ups
    with console_gateway(console_config(a.url, b.url, c.url)) as gw:
        mine = chat(gw, key=OPS_KEY).headers["x-humpyard-request-id"]
        theirs = chat(gw, key=OPS_KEY, model="backup").headers["x-humpyard-request-id"]
        open_console(page, gw, "decisions")
        search = page.locator("#decision-search")
        search.locator("input[name=request_id]").fill(mine)
        search.locator("button[type=submit]").click()
        found = page.locator(f'#decision-found .found[data-request-id="{mine}"]')
        expect(found).to_contain_text("main")
        expect(found.locator("table.attempts")).to_contain_text("fast-small")
        fits(page, width)
        screenshot(page, f"decision-search-{width}")

        search.locator("input[name=request_id]").fill("req_not_a_real_one")
        search.locator("button[type=submit]").click()
        expect(page.locator("#decision-found .not-found")).to_contain_text("No decision")

        # a plain key finds its own decisions only: another key's id is "not found"
        open_console(page, gw, "decisions", key=VIEWER_KEY)
        search.locator("input[name=request_id]").fill(theirs)
        search.locator("button[type=submit]").click()
        expect(page.locator("#decision-found .not-found")).to_contain_text("No decision")
        page.click("#decision-search-clear")
        expect(page.locator("#decision-found")).to_be_hidden()
