"""The report page in a real browser: its size and how long the η slider takes to redraw.

Runs the quickstart study in this process (into a temporary folder), writes its report,
opens it in headless Chromium (selenium, the ``browser`` extra, with the Debian packages
``chromium`` and ``chromium-driver``) and moves the η slider across its range several
times, timing each move in the page (``performance.now()`` around the input event).
Prints a table: the page's size and the move time's minimum, median and maximum.

    python benchmarks/bench_report.py            # 5 sweeps of 21 slider positions
    python benchmarks/bench_report.py --sweeps 2

Targets (issue 36): a page of at most 1.5 MB; a slider move of at most 100 ms.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise SystemExit(
            'bench_report.py drives Chromium with selenium: pip install -e ".[browser]"'
        ) from None
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        raise SystemExit("no chromium and chromedriver on PATH (Debian: chromium, chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(driver))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=5, help="slider sweeps of 21 positions")
    args = parser.parse_args()
    from dse.cli import main as dse

    with tempfile.TemporaryDirectory() as tmp:
        study = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
        study.update(output=str(Path(tmp) / "out"), execution={"workers": 0})
        path = Path(tmp) / "quickstart.yaml"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        if dse(["run", str(path), "--quiet"]) != 0 or dse(["report", str(Path(tmp) / "out")]) != 0:
            sys.exit("the quickstart run or its report failed")
        page = Path(tmp) / "out" / "report.html"
        driver = _browser()
        try:
            driver.get(page.as_uri())
            moves = [  # until every figure the move changes is drawn (the page's promise)
                driver.execute_async_script(
                    "const done = arguments[arguments.length - 1];"
                    "const s = document.getElementById('eta'); s.value = arguments[0];"
                    "const row = document.getElementById('eta-choice').dataset.row;"
                    "const t0 = performance.now(); s.dispatchEvent(new Event('input'));"
                    "s.pending.then(() => done([performance.now() - t0,"
                    " document.getElementById('eta-choice').dataset.row !== row]));",
                    str(i / 20),
                )
                for _ in range(args.sweeps)
                for i in range(21)
            ]
            # the moves to another design (the others redraw nothing)
            moves_ms = [ms for ms, changed in moves if changed] or [0.0]
        finally:
            driver.quit()
        size_mb = page.stat().st_size / 1e6
    print(f"{'quantity':<28}{'min':>10}{'median':>10}{'max':>10}")
    print(f"{'page size [MB]':<28}{size_mb:>10.2f}{size_mb:>10.2f}{size_mb:>10.2f}")
    print(
        f"{'slider move [ms] (design)':<28}{min(moves_ms):>10.1f}"
        f"{statistics.median(moves_ms):>10.1f}{max(moves_ms):>10.1f}"
    )


if __name__ == "__main__":
    main()
