"""`harness report`: one self-contained HTML file, checked by parsing it and by opening it in
headless Chromium (skipped when `chromium` is not installed; .ci/run installs it)."""

import base64
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from leaderboard_store import GOLDEN_NAME, build_store, chromium  # noqa: E402

from harness.cli.app import app  # noqa: E402
from harness.core.store import Store, open_store  # noqa: E402
from harness.results.board import Entry  # noqa: E402
from harness.results.leaderboard import build_boards  # noqa: E402
from harness.results.report import candidate_source  # noqa: E402

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Chromium's own service requests (time sync, accounts, updates) that it makes whatever the page;
# blocked by the resolver rule anyway. Everything else would come from the page.
CHROMIUM_SERVICE_HOSTS = ("google.com", "googleapis.com", "gstatic.com", "gvt1.com", "googleusercontent.com")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_store(tmp_path_factory)


@pytest.fixture(scope="module")
def report(built, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = CliRunner().invoke(app, ["report", "--store", str(built.path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    with Store(built.path) as store:
        (board,) = build_boards(store)
    return out, board


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []          # (tag, attrs dict)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def parse(path):
    parser = Collect()
    parser.feed(path.read_text())
    return parser.tags


def classes(attrs):
    return (attrs.get("class") or "").split()


def test_report_is_self_contained(report):
    path, board = report
    tags = parse(path)
    text = path.read_text()
    urls = [(tag, name, value) for tag, attrs in tags for name, value in attrs.items()
            if name in ("src", "href", "srcset", "poster", "action", "data") and value]
    external = [u for u in urls if re.match(r"\s*(https?:)?//", u[2], re.I)]
    assert external == []
    assert all(value.startswith("#") or value.startswith("data:image/png;base64,") for _, _, value in urls)
    assert not any(tag in ("script", "link", "iframe", "object", "embed", "base") for tag, _ in tags)
    assert "url(" not in text and "@import" not in text and "@font-face" not in text
    images = [attrs["src"] for tag, attrs in tags if tag == "img"]
    assert len(images) == 2   # one speedup chart (one problem/size) and the outcome chart
    for src in images:
        png = base64.b64decode(src.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_report_rows_and_details(report, built):
    path, board = report
    tags = parse(path)
    text = path.read_text()
    candidate_rows = [a for t, a in tags if t == "tr" and "row-candidate" in classes(a)]
    reference_rows = [a for t, a in tags if t == "tr" and "row-reference" in classes(a) and "summary-row" not in classes(a)]
    assert len(candidate_rows) == len(board.candidates) == 10
    assert len(reference_rows) == len(board.references) == 2   # baseline/eager and the golden kernel
    assert [a["data-outcome"] for a in candidate_rows[:2]] == ["correct"] * 2
    details = [a for t, a in tags if t == "section" and "detail" in classes(a)]
    assert len(details) == len(board.candidates) + 1        # + the golden kernel
    links = {a["href"][1:] for t, a in tags if t == "a" and a.get("href", "").startswith("#")}
    assert links == {a["id"] for a in details}
    assert f"GPU: <b>{board.gpu}</b>" in text and f"Leaderboard on {board.gpu}" in text
    assert GOLDEN_NAME in text and "baseline/eager" in text

    def section(name):
        start = text.index(f"<h3>{name}</h3>")
        return text[start:text.index("</section>", start)]

    correct = section("eval/noisy_loose.py")
    assert 'style="color: #008000; font-weight: bold">class</span>' in correct   # pygments, inline styles
    assert "ModelNew" in correct and "Correctness" in correct and "Timing" in correct
    assert "bn.running_var" in correct                                          # per-tensor errors
    assert "kernel launch failed" in section("eval/forward_raises.py")
    assert "precision_flags" in section("eval/tf32_flag.py")
    assert "syntax error at line" in section("eval/syntax_error.py")
    assert "never closed" in section(f"{built.run_id}/1") and "timeout" in section(f"{built.run_id}/2")
    assert "source not available" in section(f"{built.run_id}/2")


def test_source_fallback_and_empty_store(built, tmp_path):
    file = built.workdir / "noisy_loose.py"
    with Store(built.path) as store:
        row = next(r for r in store.list_verdicts(run="eval") if r.sample == "noisy_loose.py")
        verdict = row.verdict.model_copy(update={"candidate": str(file)})
        entry = Entry(kind="candidate", name="x", gpu="g", problem="p", size="s", status="correct",
                      outcome="correct", verdict=verdict, source_sha256=row.source_sha256)
        assert candidate_source(store, entry) == file.read_text()          # read from the file
        entry.source_sha256 = "0" * 64
        assert candidate_source(store, entry) is None                       # changed since: omitted
    empty = tmp_path / "empty.sqlite"
    open_store(empty).close()
    out = tmp_path / "empty.html"
    result = CliRunner().invoke(app, ["report", "--store", str(empty), "--out", str(out)])
    assert result.exit_code == 0 and "No verdicts" in out.read_text()


PROBE = """<pre id="probe"></pre><script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  document.getElementById('probe').textContent = JSON.stringify({
    rows: document.querySelectorAll('tr.row-candidate').length,
    details: document.querySelectorAll('section.detail').length,
    title: document.title,
    imgs: imgs.map(function (i) {
      return {complete: i.complete, w: i.naturalWidth, h: i.naturalHeight, shown: i.getBoundingClientRect().width,
              data: i.src.indexOf('data:image/png;base64,') === 0};
    })
  });
});
</script>"""


def run_chromium(args, profile, timeout=90):
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def page_requests(stderr):
    """URLs requested over the network, from Chromium's verbose log, less its own service calls."""
    urls = re.findall(r"NotifyBeforeURLRequest: (\S+)", stderr)
    return [u for u in urls
            if not any(re.match(rf"https?://([^/]+\.)?{re.escape(h)}(:\d+)?/", u) for h in CHROMIUM_SERVICE_HOSTS)]


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_renders_in_chromium(report, tmp_path):
    path, board = report
    offline = ["--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=1",
               "--virtual-time-budget=5000"]
    # 1. the DOM after load: rows, sections, charts decoded with a size (a probe script added to a copy)
    probe = tmp_path / "probe.html"
    probe.write_text(path.read_text().replace("</body>", PROBE + "</body>"))
    dom = run_chromium([*offline, "--dump-dom", probe.as_uri()], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    match = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert match and match.group(1), dom.stdout[-2000:]
    seen = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert seen["rows"] == len(board.candidates) and seen["details"] == len(board.candidates) + 1
    assert board.gpu in seen["title"]
    assert len(seen["imgs"]) == 2
    for img in seen["imgs"]:
        assert img["complete"] and img["data"] and img["w"] > 300 and img["h"] > 100 and img["shown"] > 300
    # 2. no request left the page (Chromium logs every URL request at --v=1)
    assert page_requests(dom.stderr) == []
    assert "NotifyBeforeURLRequest" in dom.stderr   # the log is there: the check above has something to read
    # the same check catches a page that does reach out
    control = tmp_path / "control.html"
    control.write_text('<html><body><img src="http://example.com/x.png"></body></html>')
    reached = run_chromium([*offline, "--dump-dom", control.as_uri()], tmp_path / "profile-control")
    assert page_requests(reached.stderr) == ["http://example.com/x.png"]
    # 3. a screenshot of the report itself: a real picture, not a blank page
    shot = tmp_path / "report.png"
    taken = run_chromium(["--virtual-time-budget=5000", f"--screenshot={shot}", "--window-size=1400,3000",
                          path.as_uri()], tmp_path / "profile-shot")
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (3000, 1400)
    assert shot.stat().st_size > 50_000 and pixels[..., :3].std() > 0.05
    non_white = (pixels[..., :3] < 0.9).any(axis=2).mean()
    assert 0.03 < non_white < 0.9


def test_the_report_and_the_readme_state_the_same_rule_for_speedups(report):
    import html

    from evaluator.wire.records import SPEEDUP_RULE

    def words(text):
        return " ".join(text.split())

    assert words(SPEEDUP_RULE) in words(html.unescape(report[0].read_text()))
    assert words(SPEEDUP_RULE) in words((Path(__file__).parent.parent / "README.md").read_text())
    assert "same worker process" not in report[0].read_text()  # the words of the design before the referee


PLAYWRIGHT_CONTROL = """<html><body><a href="#nowhere">x</a><img src="data:image/png;base64,AAAA">
<script>console.error("control error")</script></body></html>"""


def _read_in_playwright(url: str) -> dict:
    """What a real browser, driven through Playwright, saw of a page: console errors and uncaught
    exceptions, the images and whether each decoded, in-page links and those that lead nowhere, and
    every request that left the page."""
    from playwright.sync_api import sync_playwright

    seen: dict = {"errors": [], "requests": []}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(),
                                         args=["--no-sandbox", "--host-resolver-rules=MAP * ~NOTFOUND"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: seen["errors"].append(str(e)))
            page.on("request", lambda r: seen["requests"].append(r.url)
                    if not r.url.startswith(("file:", "data:")) else None)
            page.goto(url, wait_until="load")
            seen["images"] = page.evaluate(
                "() => [...document.images].map(i => ({decoded: i.complete && i.naturalWidth > 0,"
                " width: i.naturalWidth}))")
            seen["links"] = page.evaluate("() => [...document.querySelectorAll('a[href^=\"#\"]')]"
                                          ".map(a => a.getAttribute('href'))")
            seen["dead_links"] = page.evaluate(
                "links => links.filter(h => !document.getElementById(decodeURIComponent(h.slice(1))))", seen["links"])
        finally:
            browser.close()
    return seen


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_report_loads_in_chromium_through_playwright_with_no_error(report, tmp_path):
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    path, board = report
    seen = _read_in_playwright(path.as_uri())
    assert seen["errors"] == [] and seen["requests"] == []
    assert len(seen["images"]) == 2 and all(i["decoded"] and i["width"] > 300 for i in seen["images"])
    assert seen["links"] and seen["dead_links"] == []  # each candidate row links to its section
    # the same reading catches a page with an error, an image that does not decode and a dead link
    control = tmp_path / "control.html"
    control.write_text(PLAYWRIGHT_CONTROL)
    caught = _read_in_playwright(control.as_uri())
    assert "control error" in caught["errors"] and not caught["images"][0]["decoded"]
    assert caught["dead_links"] == ["#nowhere"]


def test_no_negative_time_is_ever_shown():
    """A figure per call is a window less its cost; where the clock cannot resolve a call it may come out at or under
    zero (`min -0.0279 ms` once reached the report): shown as under the clock's floor."""
    from harness.core.text import fmt_call_ms

    assert fmt_call_ms(-0.0279) == "<floor" and fmt_call_ms(0.0) == "<floor"
    assert fmt_call_ms(0.5) == "0.5000" and fmt_call_ms(None) == "-"
