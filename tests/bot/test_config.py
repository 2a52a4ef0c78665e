from pathlib import Path

import pytest
from atrex.bot.config import SETTINGS, BotConfig, ConfigError, load_config, settings_table


def test_env_settings_parse_and_override_the_file(tmp_path):
    toml = tmp_path / "bot.toml"
    toml.write_text('[bot]\napp_id = 7\nwebhook_secret = "s"\ngpus = [0, 1]\nlease_s = 60\n')
    config = load_config(toml, env={"ATREX_APP_ID": "9", "ATREX_RUN_DRAFTS": "yes",
                                    "ATREX_GITHUB_API_URL": "https://ghe.example.com/api/v3/"})
    assert config.app_id == 9  # the environment wins over the file
    assert config.webhook_secret == "s" and config.gpus == (0, 1) and config.lease_s == 60.0
    assert config.run_drafts is True
    assert config.github_api_url == "https://ghe.example.com/api/v3"


def test_config_file_from_environment(tmp_path):
    toml = tmp_path / "bot.toml"
    toml.write_text('[bot]\ncheck_name = "kernels"\n')
    assert load_config(env={"ATREX_CONFIG": str(toml)}).check_name == "kernels"


@pytest.mark.parametrize("env,setting", [
    ({"ATREX_APP_ID": "abc"}, "ATREX_APP_ID"),
    ({"ATREX_APP_ID": "0"}, "ATREX_APP_ID"),
    ({"ATREX_GITHUB_API_URL": "ftp://x"}, "ATREX_GITHUB_API_URL"),
    ({"ATREX_GPUS": "0,0"}, "ATREX_GPUS"),
    ({"ATREX_DEVICE": "tpu"}, "ATREX_DEVICE"),
    ({"ATREX_RUN_DRAFTS": "maybe"}, "ATREX_RUN_DRAFTS"),
])
def test_invalid_values_name_the_setting(env, setting):
    with pytest.raises(ConfigError) as info:
        load_config(env=env)
    assert str(info.value).startswith(setting)


def test_unknown_or_bad_file_keys_name_the_key(tmp_path):
    toml = tmp_path / "bot.toml"
    toml.write_text("[bot]\nap_id = 7\n")
    with pytest.raises(ConfigError, match="bot.ap_id: unknown setting"):
        load_config(toml, env={})
    toml.write_text("[bot\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(toml, env={})
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml", env={})


def test_require_names_the_missing_setting(tmp_path):
    with pytest.raises(ConfigError, match="^ATREX_WEBHOOK_SECRET: required"):
        BotConfig().require("webhook_secret")
    key = tmp_path / "key.pem"
    key.write_text("not a key")
    with pytest.raises(ConfigError, match="^ATREX_PRIVATE_KEY_PATH: .* not an unencrypted PEM"):
        BotConfig(private_key_path=key).require("private_key_path")
    with pytest.raises(ConfigError, match="^ATREX_PRIVATE_KEY_PATH: cannot read"):
        BotConfig(private_key_path=tmp_path / "nope.pem").require("private_key_path")
    with pytest.raises(ConfigError, match="^ATREX_HEARTBEAT_S"):
        BotConfig(webhook_secret="s", lease_s=5, heartbeat_s=5).require("webhook_secret")


def test_default_database_lives_in_the_data_dir(tmp_path):
    config = BotConfig(data_dir=tmp_path)
    assert config.db_url == f"sqlite:///{tmp_path / 'atrex-bot.db'}"
    assert BotConfig(database_url="sqlite:////x.db").db_url == "sqlite:////x.db"


def test_settings_table_matches_the_dataclass_and_the_docs():
    fields = set(BotConfig.__dataclass_fields__)
    assert fields == {s.name for s in SETTINGS}
    docs = (Path(__file__).resolve().parents[2] / "docs" / "bot.md").read_text()
    assert settings_table() in docs, "docs/bot.md's settings table is out of date"
