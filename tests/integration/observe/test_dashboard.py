"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright, against a
real Host. It logs in with a token, finds a queue (its chart and peek), a workflow instance (its
history timeline) and a worker's live log line, and saves screenshots under the test's output."""

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright, expect

from tests.conformance.kit import Api, Flows
from tests.hostkit import Host
from tests.httpkit import WORKFLOW
from tests.integration.observe.kit import PRINTER_JS, STEPS_JS

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


async def name_of(api: Api, uid: str) -> str:
    return (await api.get(uid)).json()["name"]  # type: ignore[no-any-return]


POINTS = "(id) => Chart.getChart(document.querySelector(`[data-testid=${id}]`))?.data.labels.length ?? 0"


async def chart_points(page: Page, testid: str) -> Any:
    return await page.evaluate(POINTS, testid)


async def until_points(page: Page, testid: str, at_least: int) -> None:
    """The chart is drawn by Chart.js and holds that many points (a poll adds one every 2 s)."""
    await page.wait_for_function(f"({POINTS})({testid!r}) >= {at_least}", timeout=15_000)


async def test_queue_instance_and_live_log_in_chromium(api: Api, host: Host, tmp_path: Path) -> None:
    # QC-39, QC-52, WF-9, WF-21: a read shows the queue's counts and messages, the instance's history
    backlog = await api.queue(name=f"backlog-{uuid.uuid4().hex[:6]}")
    await api.send(backlog, "waiting for a consumer")
    q = await api.queue()
    worker = await api.worker(source=PRINTER_JS)
    await api.consumer(q, worker, maxBatchSize=1)
    flow_worker = await api.worker(source=STEPS_JS, handlers=())
    wf = await api.create(
        f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": flow_worker}, "className": "Flow"}
    )
    flows = Flows(api, wf)
    iid = f"order-{uuid.uuid4().hex[:6]}"
    await flows.started(id=iid)
    await flows.until(iid, "complete")

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            offsite: list[str] = []
            page.on("request", lambda r: None if r.url.startswith(host.url) else offsite.append(r.url))
            await page.goto(f"{host.url}/ui/")
            await page.fill("#token", api.token)
            await page.click("#login button")
            await page.click(f"[data-space='{api.space}']")

            await page.click(f"[data-resource='{await name_of(api, backlog)}']")
            await expect(page.get_by_test_id("peek")).to_contain_text("waiting for a consumer")
            await until_points(page, "queue-chart", 2)
            await page.screenshot(path=tmp_path / "queue.png", full_page=True)

            await page.click(f"[data-resource='{await name_of(api, wf)}']")
            await page.fill("[data-testid=instance-search]", iid[-6:])
            await page.click(f"[data-instance='{iid}']")
            history = page.get_by_test_id("history")
            await expect(history).to_contain_text("StepAttemptCommitted one")
            await expect(history).to_contain_text("complete")
            assert await chart_points(page, "timeline") >= 4
            await page.screenshot(path=tmp_path / "instance.png", full_page=True)

            await page.click(f"[data-resource='{await name_of(api, worker)}']")
            await expect(page.get_by_test_id("log")).to_be_visible()
            (message_id,) = await api.send(q, "hello")
            await expect(page.get_by_test_id("log")).to_contain_text(f"hello from {message_id}", timeout=30_000)
            await page.screenshot(path=tmp_path / "log.png", full_page=True)
            assert offsite == []  # every asset is the Host's own
        finally:
            await browser.close()
    assert all((tmp_path / f).stat().st_size > 10_000 for f in ("queue.png", "instance.png", "log.png"))
