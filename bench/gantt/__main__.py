"""How long the HTML Gantt chart of 10,000 jobs takes to open in a browser (target: 5 s).

Run: ``.venv/bin/python -m bench.gantt`` (``--jobs``, ``--trace``, ``--policy``,
``--repeat``). It replays the first ``--jobs`` jobs of a real trace (KTH-SP2
by default, from ``../shared/workloads/pwa``; a synthetic trace of as many
jobs where that is absent) through the twin under FCFS-malleable, so the
chart has resizes as well as starts, writes the run and draws it with
``accordion gantt``'s code, then opens the HTML file in headless Chromium
(Debian's, driven by Playwright, as the browser tests do) ``--repeat`` times.

"Opened" is from the navigation's start until BokehJS has built the
document (the page's ready flag) and the browser has painted a frame after
it. The yardstick, measured the same way in the same browser, is the same
chart with no bar: what loading BokehJS itself costs, whatever the jobs.
Times are wall-clock seconds of this machine; the median of the repeats is
printed beside each.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from accordion.experiments.runs import load_workload, run_policy, write_run
from accordion.gantt.html import write_html
from accordion.gantt.layout import lay_out
from accordion.gantt.png import write_png
from accordion.gantt.twin_run import load_twin_run
from workload.swf import write_swf
from workload.synthetic import SyntheticSpec, generate, header

ROOT = Path(__file__).resolve().parents[2]
PWA = ROOT.parent / "shared" / "workloads" / "pwa"
TARGET = 5.0
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
OPENED = """async () => {
    await new Promise(done => {
        const check = () => document.body && document.body.dataset.ganttReady === '1'
            ? requestAnimationFrame(() => requestAnimationFrame(done))
            : setTimeout(check, 5);
        check();
    });
}"""


def open_times(path: Path, repeat: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    times: list[float] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            for _ in range(repeat):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                began = time.perf_counter()
                page.goto(path.as_uri(), wait_until="commit", timeout=120_000)
                page.evaluate(OPENED)
                times.append(time.perf_counter() - began)
                page.close()
        finally:
            browser.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--trace", default="KTH-SP2-1996-2.1-cln.swf.gz")
    parser.add_argument("--policy", default="fcfs-malleable")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="leave the run and the charts here")
    args = parser.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="bench-gantt-"))
    trace = PWA / args.trace
    if not trace.is_file():
        spec = SyntheticSpec(jobs=args.jobs, cpus=128, load=0.9, users=40, seed=1)
        trace = out / "synthetic.swf"
        write_swf(trace, generate(spec), header=header(spec))
    workload = load_workload(trace, cluster=None, jobs=args.jobs)
    write_run(out, run_policy(workload, args.policy))
    began = time.perf_counter()
    gantt = load_twin_run(out)
    layout = lay_out(gantt)
    laid = time.perf_counter() - began
    html = out / "gantt.html"
    began = time.perf_counter()
    write_html(html, gantt, layout=layout)
    wrote_html = time.perf_counter() - began
    began = time.perf_counter()
    write_png(out / "gantt.png", gantt, layout=layout)
    wrote_png = time.perf_counter() - began
    empty = out / "empty.html"
    write_html(empty, replace(gantt, bars=()))
    full = open_times(html, args.repeat)
    yardstick = open_times(empty, args.repeat)
    print(
        f"{workload.name}, first {len(workload.jobs)} jobs, {args.policy}: "
        f"{gantt.jobs} jobs, {len(gantt.bars)} bars, {len(layout.rects)} rectangles"
    )
    print(f"  read and lay out:  {laid:.2f} s")
    print(f"  write the HTML:    {wrote_html:.2f} s ({html.stat().st_size / 1e6:.1f} MB)")
    print(f"  write the PNG:     {wrote_png:.2f} s")
    print(
        f"  open in Chromium:  median {statistics.median(full):.2f} s "
        f"(runs {', '.join(f'{t:.2f}' for t in full)}), target < {TARGET:g} s"
    )
    print(
        f"  yardstick, the same chart with no bar (BokehJS alone): median "
        f"{statistics.median(yardstick):.2f} s (runs {', '.join(f'{t:.2f}' for t in yardstick)})"
    )
    print(f"  files in {out}")


if __name__ == "__main__":
    main()
