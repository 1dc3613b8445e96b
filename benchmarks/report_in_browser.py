"""report.html in a real browser: the report of a committed busy run (``benchmark_results/contention-cpu-20261126``:
its long NOT VALID verdict) opened in headless Chromium at 1,400 x 900 px, where its verdict, answer and tables lie
measured by a script in the page, and its first screen shot. Writes ``docs/report-in-chromium/geometry.json`` and
``first-screen.png``; ``tests/test_report.py`` checks that they are of today's page and that the page passes (and
measures it again where Chromium is installed). Run it after any change to the report's page or its first sections:

    apt-get install chromium   # Debian's package
    python benchmarks/report_in_browser.py
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import browser  # noqa: E402

from inferbench.api import report  # noqa: E402


def main() -> int:
    found = browser.chromium()
    if found is None:
        print("report_in_browser: no Chromium here (apt-get install chromium, or set INFERBENCH_CHROMIUM)",
              file=sys.stderr)
        return 2
    os.chdir(browser.ROOT)  # the folder named as the test names it
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report"
        page = report(browser.FOLDER, out=out).with_name("report.html")
        geometry = browser.measure(page, found)
        browser.SEEN.mkdir(parents=True, exist_ok=True)
        browser.screenshot(page, browser.SEEN / "first-screen.png", found)
        version = subprocess.run([found, "--version"], capture_output=True, text=True).stdout.strip()
        seen = {"page_digest": browser.page_digest(page.read_text()), "folder": browser.FOLDER.name,
                "window": list(browser.WINDOW), "browser": version, "date": datetime.date.today().isoformat(),
                "geometry": geometry}
    (browser.SEEN / "geometry.json").write_text(json.dumps(seen, indent=1) + "\n")
    print(f"report_in_browser: {version}: verdict {geometry['verdict']['text']!r} at "
          f"{geometry['verdict']['box']}, written to {browser.SEEN}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
