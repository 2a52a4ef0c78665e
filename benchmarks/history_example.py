"""The dashboard of the example repository (examples/kernels) from its measured H200 history.

Records the committed H200 reports of `atrex check examples/kernels` as default-branch
evaluations of that repository, at the commits that produced them (benchmarks/results/README.md),
in a fresh SQLite database, serves the real dashboard (`atrex.bot.app.create_app`) on loopback,
opens it through a secret link in headless Chromium (Debian's package, driven by Playwright) and
writes the screenshot:

    python benchmarks/history_example.py docs/img/dashboard-example.png

Every number on the page is a measured one; there are as many points as H200 runs of the whole
example repository (two so far).
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from werkzeug.serving import make_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atrex.bot.app import create_app  # noqa: E402
from atrex.bot.config import load_config  # noqa: E402
from atrex.bot.history import BRANCH  # noqa: E402
from atrex.runner.model import Report  # noqa: E402

REPO = "atrex/examples-kernels"  # examples/kernels of this project (its commits are ours)
RUNS = [  # (report, the commit that produced it), oldest first
    ("benchmarks/results/h200-runner/examples-h200.json", "28c7f39"),
    ("benchmarks/results/h200-judge/examples-h200.json", "3dcfa42"),
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def full_sha(short: str) -> str:
    return subprocess.run(["git", "rev-parse", short], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(env={"ATREX_WEBHOOK_SECRET": "unused", "ATREX_DATA_DIR": tmp,
                                  "ATREX_HISTORY_BRANCH_DAYS": "0"})
        app = create_app(config)
        dashboard = app.extensions["atrex.dashboard"]
        for path, commit in RUNS:
            report = Report.from_json((ROOT / path).read_text())
            at = dt.datetime.fromisoformat(report.created_at).timestamp()
            dashboard.history.record(f"example:{commit}", REPO, full_sha(commit), BRANCH,
                                     report, ref="main", at=at)
        secret = dashboard.access.link_secret(REPO)
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}/dashboard/{REPO}?key={secret}"
        try:
            shoot(url, args.out, args.chromium, Path(tmp) / "profile")
        finally:
            server.shutdown()
    print(f"wrote {args.out}")
    return 0


def shoot(url: str, out: Path, chromium: str, profile: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(profile), executable_path=chromium, headless=True, args=FLAGS,
            viewport={"width": 1560, "height": 900})
        try:
            page = browser.new_page()
            page.goto(url)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()


if __name__ == "__main__":
    sys.exit(main())
