"""The audit page as an on-call reader sees it (issue 21): headless Chromium at 1400 px renders the report of
three tiers and two topics — wide tables scroll inside their own section instead of widening the page, pending
windows do not list missing sequences, and the plot's legend names the hollow pending markers. The audit service
and the Airflow Audit view embed this same page (render_page), so both get it."""

import html

import pytest
from browser import Browser

from audit.render import PENDING_LABEL, render_page

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def row(topic, start, tier, expected, missing, status):
    return {"topic": topic, "window_start": start, "window_end": start + 60_000, "tier": tier,
            "expected": expected, "received": expected - missing, "distinct": expected - missing,
            "missing": missing, "duplicates": 0, "completeness": 100.0 * (expected - missing) / expected,
            "status": status, "missing_sequences": {"frontend-1": [[1, 3]]} if missing else {}}


def test_report_fits_1400px_and_pending_windows_read_as_pending(tmp_path):
    rows = []
    for topic in ("page-views-with-a-long-topic-name", "clicks"):
        for i in range(6):
            start = 1_700_000_000_000 + i * 60_000
            last = i == 5
            rows += [row(topic, start, "live", 1000, 0, "complete"),
                     row(topic, start, "offline", 1000, 0 if i != 2 else 3, "complete" if i != 2 else "lost"),
                     row(topic, start, "warehouse", 1000, 1000 if last else 0, "pending" if last else "complete")]
    page = render_page(rows, ["live", "offline", "warehouse"])
    assert page.count("<li>") == 2  # the lost offline window of each topic; not the pending warehouse ones
    assert PENDING_LABEL and "data:image/png" in page
    path = tmp_path / "audit.html"
    path.write_text(page)
    with Browser(width=1400, height=1000) as browser:
        browser.open(f"file://{path}")
        browser.wait_for("document.readyState === 'complete' && document.querySelectorAll('table.report').length")
        page_width = browser.evaluate("document.documentElement.scrollWidth")
        viewport = browser.evaluate("window.innerWidth")
        assert page_width <= viewport, (page_width, viewport)  # nothing wider than the screen
        widths = browser.evaluate("[...document.querySelectorAll('div.scroll')].map(d => [d.clientWidth, "
                                  "d.scrollWidth])")
        assert widths and all(client <= viewport for client, _ in widths)
        shot = browser.screenshot(tmp_path / "audit-1400.png")
        assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    # the plot's legend (matplotlib text in the PNG is not searchable: the figure's legend is checked in
    # tests/unit/test_audit.py); the page embeds exactly one plot
    assert page.count("data:image/png;base64,") == 1 and html.escape("pending") in page
