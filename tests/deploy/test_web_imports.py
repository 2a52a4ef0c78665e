"""The web process never imports torch (or the runner's other heavy dependencies): the slim `bot`
image has none of them. A subprocess where importing them fails builds the `atrex` parser, starts
the app `atrex serve` runs, and takes a signed pull_request delivery through the router."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "triton", "numpy", "matplotlib", "rich", "openai", "docker")

SCRIPT = textwrap.dedent("""
    import hashlib, hmac, json, sys
    for name in {heavy!r}:
        sys.modules[name] = None  # `import name` now raises ImportError
    from atrex.cli import build_parser
    build_parser()
    from atrex.bot.config import load_config
    from atrex.bot.server import _Gunicorn, prepare
    config = load_config(env={{"ATREX_WEBHOOK_SECRET": "s", "ATREX_DATA_DIR": sys.argv[1]}})
    prepare(config)
    app = _Gunicorn(config, {{}}).load()
    payload = json.loads(open(sys.argv[2]).read())
    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(b"s", body, hashlib.sha256).hexdigest()
    response = app.test_client().post("/webhook", data=body, headers={{
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-1",
        "X-Hub-Signature-256": signature, "Content-Type": "application/json"}})
    assert response.status_code == 202, response.get_data(as_text=True)
    loaded = sorted(n for n in {heavy!r} if sys.modules.get(n) is not None)
    print("heavy modules loaded:", loaded)
""")


def test_serve_path_imports_no_torch(tmp_path):
    from tests.bot.world import pr_payload

    event = tmp_path / "event.json"
    event.write_text(json.dumps(pr_payload("opened", "octo/kernels", 1, "a" * 40, "tune")))
    result = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY),
                             str(tmp_path / "data"), str(event)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "heavy modules loaded: []" in result.stdout
