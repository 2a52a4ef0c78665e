"""Shared fixtures for the bot tests: the App's key pair, the GitHub fake, the bot's settings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from atrex.bot.config import BotConfig
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .github_fake import FakeGitHub

APP_ID = 4242
SECRET = "It's a Secret to Everybody"


@dataclass(frozen=True)
class AppKey:
    path: Path
    public_key: object


@pytest.fixture(scope="session")
def app_key(tmp_path_factory) -> AppKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path_factory.mktemp("app") / "app.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))
    return AppKey(path, key.public_key())


@pytest.fixture
def fake(app_key, monkeypatch):
    github = FakeGitHub(APP_ID, app_key.public_key).start()
    # in-process git (GitPython) fetches from the fake's HTTPS clone URLs: trust its certificate
    monkeypatch.setenv("GIT_SSL_CAINFO", github.ca_file)
    yield github
    github.stop()


def bot_settings(fake: FakeGitHub, app_key: AppKey, data_dir: Path) -> dict[str, str]:
    """ATREX_* settings for a bot talking to `fake`, with test-sized timings."""
    return {
        "ATREX_APP_ID": str(APP_ID), "ATREX_PRIVATE_KEY_PATH": str(app_key.path),
        "ATREX_WEBHOOK_SECRET": SECRET, "ATREX_GITHUB_API_URL": fake.api_url,
        "ATREX_DATA_DIR": str(data_dir), "ATREX_DEVICE": "cpu", "ATREX_GPUS": "0",
        "ATREX_LEASE_S": "3", "ATREX_HEARTBEAT_S": "0.5", "ATREX_POLL_S": "0.1",
        "ATREX_RETRY_BACKOFF_S": "0.5", "ATREX_HTTP_BACKOFF_S": "0.05",
        "ATREX_REQUEST_INTERVAL_S": "0", "ATREX_WRITE_INTERVAL_S": "0",
        "ATREX_PROGRESS_INTERVAL_S": "1", "ATREX_WEB_WORKERS": "2", "ATREX_WEB_THREADS": "4",
        "ATREX_SQLITE_SYNCHRONOUS": "NORMAL", "ATREX_SECONDARY_RATE_WAIT_S": "1",
        "ATREX_SCHEDULE_INTERVAL_S": "0",  # tests record scheduled jobs when they mean to
        "GIT_SSL_CAINFO": fake.ca_file,  # git trusts the fake's HTTPS git server
    }


def process_env(settings: dict[str, str]) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("ATREX_")}
    return {**keep, **settings}


@pytest.fixture
def config(fake, app_key, tmp_path) -> BotConfig:
    from atrex.bot.config import load_config

    return load_config(env=bot_settings(fake, app_key, tmp_path / "data"))
