"""The bot's fixtures (the App's key pair, the GitHub fake) for the deployment tests."""

from tests.bot.conftest import app_key, config, fake  # noqa: F401 - fixtures
