"""The dashboard on the real `atrex serve` (gunicorn, loopback): access control over real HTTP
against the GitHub fake's OAuth web flow, the page opened in a real headless Chromium (Debian's
package, driven by Playwright) with a screenshot checked, and `atrex history`."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import requests
from atrex.bot.dashboard.access import AccessStore
from atrex.bot.history import BRANCH, PR, HistoryStore
from atrex.bot.store import SqlStore
from atrex.runner.model import Status

from . import history_data as data
from .conftest import APP_ID, bot_settings, process_env
from .github_fake import FakeGitHub
from .world import ROOT, BotServer

pytestmark = pytest.mark.slow
REPO, PUBLIC = "octo/kernels", "octo/public"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RMSNORM = [0.35, 0.36, 0.42, 0.41, 0.30, 0.44]  # the drop at commit 5 is a regression


def sha(n: int) -> str:
    return f"{n:x}".rjust(7, "c") + "0" * 33


def populate(history: HistoryStore) -> None:
    start = time.time() - 7 * 86400
    for i, value in enumerate(RMSNORM):
        status = {"softmax": Status.FALLBACK} if i == 3 else None
        history.record(f"seed:{i}", REPO, sha(i + 1), BRANCH, data.fractions(
            {"rmsnorm": value, "silu_and_mul": 0.70, "softmax": 0.60 - i / 100},
            status=status), ref="main", pr=10 + i, at=start + i * 86400)
    history.record("seed:cpu", REPO, sha(20), BRANCH, data.fractions(
        {"rmsnorm": None}, device=data.cpu()), at=start + 6.5 * 86400)
    history.record("seed:pr", REPO, sha(30), PR, data.fractions({"rmsnorm": 0.5}), pr=42,
                   at=start + 6.6 * 86400)
    history.record("seed:public", PUBLIC, sha(40), BRANCH, data.fractions({"rmsnorm": 0.5}),
                   at=start)


@pytest.fixture(scope="module")
def site(app_key, tmp_path_factory):
    base = tmp_path_factory.mktemp("dashboard")
    fake = FakeGitHub(APP_ID, app_key.public_key).start()
    fake.add_repo(REPO, str(base / "kernels.git")).private = True
    fake.add_repo(PUBLIC, str(base / "public.git"), private=False)
    fake.set_permission(REPO, "alice", "read")
    (base / "data").mkdir()
    store = SqlStore(f"sqlite:///{base / 'data' / 'atrex-bot.db'}")
    history = HistoryStore(store)
    populate(history)
    server = BotServer({}, base / "server.log")
    settings = {**bot_settings(fake, app_key, base / "data"),
                "ATREX_OAUTH_CLIENT_ID": fake.oauth.app.client_id,
                "ATREX_OAUTH_CLIENT_SECRET": fake.oauth.app.client_secret,
                "ATREX_PUBLIC_URL": server.url}
    fake.oauth.app.callback_urls = [server.url + "/oauth/callback"]
    server.env = process_env(settings)
    server.start()
    yield type("Site", (), {"fake": fake, "server": server, "url": server.url,
                            "history": history, "store": store, "env": server.env,
                            "access": AccessStore(store)})
    server.stop()
    store.close()
    fake.stop()


def sign_in(site, login: str) -> requests.Session:
    """The OAuth web flow as a browser would follow it: dashboard -> /login -> GitHub's
    authorize -> /oauth/callback -> the dashboard."""
    site.fake.oauth.web_user = login
    session = requests.Session()
    first = session.get(f"{site.url}/dashboard/{REPO}", allow_redirects=False, timeout=10)
    assert first.status_code == 302 and first.headers["Location"].startswith("/login?next=")
    response = session.get(site.url + first.headers["Location"], timeout=10)
    assert response.history[0].headers["Location"].startswith(
        f"{site.fake.root}/login/oauth/authorize?client_id={site.fake.oauth.app.client_id}")
    session.last = response
    return session


def test_without_a_session_the_page_redirects_to_sign_in(site):
    response = requests.get(f"{site.url}/dashboard/{REPO}", allow_redirects=False, timeout=10)
    assert response.status_code == 302
    assert response.headers["Location"] == "/login?next=%2Fdashboard%2Focto%2Fkernels"
    assert requests.get(f"{site.url}/dashboard/octo/unknown", allow_redirects=False,
                        timeout=10).status_code == 404
    assert requests.get(f"{site.url}/dashboard/{REPO}/history.json", allow_redirects=False,
                        timeout=10).status_code == 302


def test_a_reader_signs_in_with_github_and_sees_the_page(site):
    session = sign_in(site, "alice")
    page = session.last
    assert page.status_code == 200 and page.url == f"{site.url}/dashboard/{REPO}"
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert "private" in page.headers["Cache-Control"]
    cookie = next(c for c in session.cookies if c.name == "atrex_session")
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert 'data-chart="chart-score"' in page.text and "alice" in page.text
    doc = session.get(f"{site.url}/dashboard/{REPO}/history.json", timeout=10).json()
    assert [c["sha"] for c in doc["commits"]] == [sha(n) for n in range(1, 7)]
    assert doc["pull_requests"][0]["pr"] == 42
    assert session.post(f"{site.url}/logout", timeout=10).status_code == 200
    assert session.get(f"{site.url}/dashboard/{REPO}", allow_redirects=False,
                       timeout=10).status_code == 302


def test_a_user_without_read_access_gets_404(site):
    session = sign_in(site, "mallory")
    assert session.last.status_code == 404
    assert session.last.url == f"{site.url}/dashboard/{REPO}"
    # a public repository is readable by every signed-in user
    assert session.get(f"{site.url}/dashboard/{PUBLIC}", timeout=10).status_code == 200
    assert session.get(f"{site.url}/dashboard/octo/unknown", timeout=10).status_code == 404


def test_a_secret_link_opens_the_page_and_a_rotation_ends_it(site):
    secret = site.access.link_secret(REPO)
    link = f"{site.url}/dashboard/{REPO}?key={secret}"
    page = requests.get(link, allow_redirects=False, timeout=10)
    assert page.status_code == 200 and 'data-chart="chart-score"' in page.text
    assert f"history.json?key={secret}" in page.text  # links on the page keep the key
    wrong = requests.get(link[:-2] + "xx", allow_redirects=False, timeout=10)
    assert wrong.status_code == 302  # not a valid link: sign in like anyone else
    other = requests.get(f"{site.url}/dashboard/{PUBLIC}?key={secret}", allow_redirects=False,
                         timeout=10)
    assert other.status_code == 302  # a link opens its own repository only
    rotated = subprocess.run([sys.executable, "-m", "atrex", "history", REPO, "--rotate-link"],
                             cwd=ROOT, env=site.env, capture_output=True, text=True, timeout=60)
    assert rotated.returncode == 0, rotated.stderr
    new_link = rotated.stdout.strip()
    assert new_link.startswith(f"{site.url}/dashboard/{REPO}?key=") and new_link != link
    assert requests.get(link, allow_redirects=False, timeout=10).status_code == 302
    assert requests.get(new_link, allow_redirects=False, timeout=10).status_code == 200


def test_forged_sign_ins_and_open_redirects_are_refused(site):
    session = requests.Session()
    login = session.get(f"{site.url}/login?next=https://evil.example/x", allow_redirects=False,
                        timeout=10)
    state = parse_qs(urlparse(login.headers["Location"]).query)["state"][0]
    forged = session.get(f"{site.url}/oauth/callback?code=abc&state=not-{state}",
                         allow_redirects=False, timeout=10)
    assert forged.status_code == 400 and "state mismatch" in forged.text
    bad_code = session.get(f"{site.url}/oauth/callback?code=abc&state={state}",
                           allow_redirects=False, timeout=10)
    assert bad_code.status_code == 400 and "incorrect or expired" in bad_code.text
    site.fake.oauth.web_user = "alice"
    done = session.get(login.headers["Location"], allow_redirects=True, timeout=10)
    assert done.url == f"{site.url}/"  # the foreign `next` was dropped


def test_an_expired_github_token_asks_to_sign_in_again(site):
    session = sign_in(site, "alice")
    assert session.last.status_code == 200
    site.fake.oauth.expire_tokens()
    # the server trusts GitHub's answer for a minute: ask about a repository not asked yet
    answer = session.get(f"{site.url}/dashboard/{PUBLIC}", allow_redirects=False, timeout=10)
    assert answer.status_code == 302 and answer.headers["Location"].startswith("/login")


def test_atrex_history_prints_the_series(site):
    result = subprocess.run([sys.executable, "-m", "atrex", "history", REPO], cwd=ROOT,
                            env=site.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "NVIDIA H200 (h200_sxm), datasheet peaks · 6 default-branch commits" in lines[0]
    assert "cpu/cpu (1)" in lines[1]  # other environments are named, not compared
    row5 = next(line for line in lines if line.startswith(sha(5)[:7]))
    assert "#14" in row5 and "0.300▼" in row5 and "fallback" not in row5
    assert "fallback▼" in next(line for line in lines if line.startswith(sha(4)[:7]))
    as_json = subprocess.run([sys.executable, "-m", "atrex", "history", REPO, "--json"],
                             cwd=ROOT, env=site.env, capture_output=True, text=True, timeout=60)
    doc = json.loads(as_json.stdout)
    served = requests.get(f"{site.url}/dashboard/{REPO}/history.json?key="
                          f"{site.access.link_secret(REPO)}", timeout=10).json()
    assert doc["commits"] == served["commits"] and doc["regressions"] == served["regressions"]
    bad = subprocess.run([sys.executable, "-m", "atrex", "history", "kernels"], cwd=ROOT,
                         env=site.env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "owner/name" in bad.stderr


def test_the_page_in_a_real_browser(site, tmp_path):
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    from PIL import Image
    from playwright.sync_api import sync_playwright

    site.fake.oauth.web_user = "alice"
    recorded = {e.sha: e for e in site.history.evaluations(REPO, kind=BRANCH)
                if e.env.device_kind == "cuda"}
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True,
            args=FLAGS, viewport={"width": 1560, "height": 1000})
        try:
            page = browser.new_page()
            page.goto(f"{site.url}/dashboard/{REPO}")  # signs in through the fake's OAuth flow
            assert page.url == f"{site.url}/dashboard/{REPO}"
            points = page.eval_on_selector_all(
                "svg[data-chart=chart-score] circle.pt",
                "els => els.map(e => [e.dataset.sha, Number(e.dataset.value)])")
            assert [s for s, _ in points] == [sha(n) for n in range(1, 7)]
            for point_sha, value in points:
                assert value == pytest.approx(recorded[point_sha].score, rel=1e-12)
            rms = page.eval_on_selector_all(
                "svg[data-chart=chart-op-rmsnorm] circle.pt[data-series=fraction]",
                "els => els.map(e => Number(e.dataset.value))")
            assert rms == pytest.approx(RMSNORM)
            marked = page.eval_on_selector_all(
                "svg[data-chart=chart-op-rmsnorm] path.regression[data-series=fraction]",
                "els => els.map(e => e.dataset.sha)")
            assert marked == [sha(5)]
            assert page.locator("#latest a[href$='/pull/15']").count() >= 1  # moved by #15
            shot = page.screenshot(full_page=True)
            score_png = page.locator("svg[data-chart=chart-score]").screenshot()
            rms_png = page.locator("svg[data-chart=chart-op-rmsnorm]").screenshot()
        finally:
            browser.close()
    (tmp_path / "dashboard.png").write_bytes(shot)
    full = Image.open(io.BytesIO(shot)).convert("RGB")
    assert full.width == 1560 and full.height > 1500
    assert colored(score_png, (9, 105, 218)) > 200  # the score line and its points
    assert colored(rms_png, (209, 36, 47)) > 40  # the regression marker


def colored(png: bytes, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
    return int((np.abs(pixels - np.array(rgb, dtype=np.int16)).max(axis=2) <= tolerance).sum())
