"""report.html as a reader's browser lays it out: the page opened in headless Chromium (Debian's ``chromium``) at a
1,400 x 900 px window, a script measuring where the verdict, the answer and the tables lie, and a screenshot of the
first screen. Used by the report's test (live where Chromium is installed) and by
``benchmarks/report_in_browser.py``, which commits what it measured beside a screenshot."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

WINDOW = (1400, 900)

#: Runs in the page once it has loaded: the geometry a reader meets, as JSON in an element of its own.
MEASURE = """<script>
window.addEventListener("load", () => {
  const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
  const verdict = document.querySelector(".good, .bad, .unknown");
  const answer = verdict ? verdict.closest("pre") || verdict.parentElement : null;
  const tables = [...document.querySelectorAll("table")].map((t) => ({
    box: box(t), scroll_width: t.scrollWidth, client_width: t.clientWidth,
    header: [...t.querySelectorAll("th")].map((th) => ({text: th.textContent.trim(), box: box(th)}))}));
  const out = {
    viewport: {width: window.innerWidth, height: window.innerHeight},
    page_scroll_width: document.documentElement.scrollWidth,
    title: document.title, h1: (document.querySelector("h1") || {}).textContent || null,
    headings: [...document.querySelectorAll("h2")].map((h) => h.textContent.trim()),
    verdict: verdict ? {text: verdict.textContent, class: verdict.className, box: box(verdict),
                        color: getComputedStyle(verdict).backgroundColor} : null,
    answer: answer ? {box: box(answer), scroll_width: answer.scrollWidth, client_width: answer.clientWidth,
                      first_line: answer.textContent.split("\\n")[0]} : null,
    tables: tables};
  const pre = document.createElement("pre"); pre.id = "inferbench-geometry";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


ROOT = Path(__file__).resolve().parents[1]
#: The committed run the check reads: a busy machine's, so that the long NOT VALID verdict is the one laid out. Given
#: relative to the checkout's root (run from there), as the report names the folders it read in its sources.
FOLDER = Path("benchmark_results") / "contention-cpu-20261126"
#: What Chromium measured of that run's report.html, and its first screen, committed.
SEEN = ROOT / "docs" / "report-in-chromium"


def page_digest(text: str) -> str:
    """The page as laid out, less its figures' bytes (a figure's pixels may differ between matplotlib builds; where it
    sits does not) and inferbench's version in its head: what the committed measurement is of."""
    text = re.sub(r'<meta name="generator"[^>]*>', "", text)  # inferbench's version: nothing laid out
    return hashlib.sha256(re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:", text).encode()).hexdigest()[:16]


def chromium() -> str | None:
    """Debian's Chromium (``apt-get install chromium``), or the browser ``$INFERBENCH_CHROMIUM`` names (set and empty:
    none, as where it is not installed)."""
    named = os.environ.get("INFERBENCH_CHROMIUM")
    if named is not None:
        return named or None
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _run(browser: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
                               f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=5000", *args],
                              capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-1500:]}")
    return done.stdout


def measure(page: Path, browser: str) -> dict[str, Any]:
    """Where ``page`` (a report.html) puts its verdict, answer and tables in a 1,400 x 900 px window."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "page.html"
        probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>", 1))
        dom = _run(browser, "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="inferbench-geometry">(.*?)</pre>', dom, re.S)
    if not found:
        raise RuntimeError(f"the page's measurement did not run: {dom[-1500:]}")
    return json.loads(html.unescape(found.group(1)))


def screenshot(page: Path, out: Path, browser: str) -> None:
    """The first screen of ``page`` as a reader sees it, in ``out`` (PNG)."""
    _run(browser, f"--screenshot={out}", page.as_uri())
