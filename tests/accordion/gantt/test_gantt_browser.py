"""The Gantt chart's HTML file opens in a real browser (headless Chromium), offline."""

from __future__ import annotations

from pathlib import Path

from accordion.gantt.bars import Bar, BarKind, Gantt, MachineRow, placement_bars
from accordion.gantt.html import write_html
from accordion.gantt.layout import lay_out
from model.machine import Part
from tests.browser import ARTIFACTS, chromium


def sample() -> Gantt:
    bars: list[Bar] = []
    for k in range(200):
        start = float(k * 7 % 500)
        steps = [(start, (Part("m", 1 + k % 4),)), (start + 20, (Part("m", 1 + k % 2),))]
        bars += placement_bars(f"job-{k}", f"user{k % 5}", steps, start + 45, late=k % 17 == 0)
    bars.append(
        Bar(
            job_id="next", user="user0", machine="n", cpus=2, start=520, end=600,
            kind=BarKind.PLANNED,
        )
    )  # fmt: skip
    return Gantt(
        title="sample",
        machines=(MachineRow("m", 64), MachineRow("n", 4)),
        bars=tuple(bars),
        now=510,
    )


def test_the_html_gantt_opens_offline_with_every_rectangle_and_a_tooltip(tmp_path: Path) -> None:
    gantt = sample()
    rects = len(lay_out(gantt).rects)
    path = tmp_path / "gantt.html"
    write_html(path, gantt)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_function("document.body.dataset.ganttReady === '1'", timeout=30_000)
        counts = page.evaluate(
            """() => {
                const doc = Bokeh.documents[0];
                const n = name => doc.get_model_by_name(name).data.job.length;
                return [n("run"), n("planned"), doc.get_model_by_name("now").location];
            }"""
        )
        assert counts[0] + counts[1] == rects
        assert counts[1] == 1
        assert counts[2] > 0
        # A tooltip under the pointer names a job.
        box = page.locator("canvas").first.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.9)
        page.wait_for_selector(".bk-tooltip, .bk-Tooltip", timeout=10_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "gantt-html.png"))
    assert not errors
    assert [u for u in requests if not u.startswith("file:")] == []  # nothing from the network
