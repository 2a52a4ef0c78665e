"""The bot's settings: one table, read from `ATREX_*` environment variables and/or a TOML file.

Every setting has one name, used as the TOML key (in a `[bot]` table) and, upper-cased with the
`ATREX_` prefix, as the environment variable; the environment wins over the file. Nothing is read at
import: `load_config()` is called by the CLI (or a test) and returns a frozen `BotConfig`. A missing
or invalid value raises `ConfigError` naming the setting, before any server or worker starts.
Each process checks only what it needs (`BotConfig.require`): the web process never needs the App's
private key, only the webhook secret and the database.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ENV_PREFIX = "ATREX_"
CONFIG_ENV = "ATREX_CONFIG"
OPENAI_KEY_ENV = "OPENAI_API_KEY"  # the LLM key's conventional name, used when ATREX_LLM_API_KEY
# is unset


class ConfigError(Exception):
    """A setting is missing or invalid; the message starts with the setting's name."""

    def __init__(self, setting: str, message: str):
        self.setting = setting
        super().__init__(f"{setting}: {message}")


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # "int", "float", "bool", "str", "path", "url", "ints", "choice"
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    secret: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting("app_id", "int", None, "The GitHub App's numeric id (App settings page).", minimum=1),
    Setting("private_key_path", "path", None,
            "PEM file of the App's private key (workers only; the web process never reads it).",
            secret=True),
    Setting("webhook_secret", "str", None,
            "The App's webhook secret; every delivery's X-Hub-Signature-256 is checked with it.",
            secret=True),
    Setting("github_api_url", "url", "https://api.github.com",
            "REST API root: https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise."),
    Setting("database_url", "str", None,
            "SQLAlchemy URL of the job store; default sqlite:///DATA_DIR/atrex-bot.db."),
    Setting("data_dir", "path", "atrex-data",
            "Working directory for git caches, checkouts and the default SQLite database."),
    Setting("check_name", "str", "atrex", "Name of the check run shown on pull requests."),
    Setting("bot_login", "str", None,
            "The App's bot login (e.g. atrex[bot]); default: the App's slug from GET /app."),
    Setting("device", "choice", "auto", "Where workers evaluate: auto, cpu or cuda.",
            choices=("auto", "cpu", "cuda")),
    Setting("gpus", "ints", (0,), "GPU indices a worker serves, one job per GPU at a time "
            "(comma-separated)."),
    Setting("lease_s", "float", 120.0, "A claimed job's lease; a dead worker's job is taken "
            "again after it expires.", minimum=1),
    Setting("heartbeat_s", "float", 15.0, "How often a worker renews its lease.", minimum=0.05),
    Setting("poll_s", "float", 1.0, "How often an idle worker looks for work.", minimum=0.01),
    Setting("max_attempts", "int", 3, "Tries per job (a crash or an infrastructure error "
            "counts as one) before it is reported as failed.", minimum=1),
    Setting("retry_backoff_s", "float", 30.0, "Delay before a failed job is tried again.",
            minimum=0),
    Setting("run_drafts", "bool", False, "Evaluate draft pull requests too."),
    Setting("optimize_runner", "str", None,
            "What runs `/atrex optimize` jobs: unset, the bundled agent (bot.agent_bridge) when "
            "the agent is installed; `none` to turn the command off; or a module:function taking "
            "a bot.jobs.OptimizeRequest."),
    Setting("llm_base_url", "url", None,
            "OpenAI-compatible endpoint for the agent's `llm` proposer; without it (and without "
            "an API key) the agent uses `autotune` and `kb` only."),
    Setting("llm_model", "str", None,
            "Model for the `llm` proposer (a repository's `[agent] model` overrides it)."),
    Setting("llm_api_key", "str", None,
            "API key of the LLM endpoint; default: $OPENAI_API_KEY. Stays in the worker: "
            "candidate code never sees it.", secret=True),
    Setting("agent_max_gpu_minutes", "float", 30.0,
            "Most GPU-minutes one agent run may spend on one operator, whatever a repository's "
            "`[agent] gpu_minutes` asks.", minimum=0.1),
    Setting("schedule_interval_s", "float", 900.0,
            "How often a worker (with the light lane) checks installed repositories for due "
            "scheduled runs; 0 turns the scheduler thread off (use `atrex schedule run-once`).",
            minimum=0),
    Setting("http_retries", "int", 5, "Retries of a GitHub request on 5xx and rate limits.",
            minimum=0),
    Setting("http_backoff_s", "float", 1.0, "Exponential backoff factor between GitHub retries.",
            minimum=0),
    Setting("secondary_rate_wait_s", "float", 60.0,
            "Wait after a secondary rate limit that has no Retry-After header.", minimum=0),
    Setting("http_timeout_s", "float", 30.0, "Timeout of one GitHub request.", minimum=1),
    Setting("request_interval_s", "float", 0.25, "Least time between two GitHub requests of "
            "one job (PyGithub's throttle).", minimum=0),
    Setting("write_interval_s", "float", 1.0, "Least time between two GitHub writes of one "
            "job, as GitHub asks of integrations.", minimum=0),
    Setting("progress_interval_s", "float", 30.0,
            "Least time between check-run progress updates during an evaluation.", minimum=0),
    Setting("web_workers", "int", 1, "Web server processes (one is plenty: an acknowledgement "
            "costs about a millisecond of CPU; more processes contend for SQLite's write lock).",
            minimum=1),
    Setting("web_threads", "int", 8, "Threads per web server process.", minimum=1),
    Setting("web_read_timeout_s", "float", 10.0,
            "Most time a client may take to send a whole request (headers and body); slower "
            "ones are answered 408. Requests are read by the server's event loop, so a slow "
            "client never holds a thread (GitHub itself gives up on a delivery after 10 s).",
            minimum=0.5),
    Setting("sqlite_synchronous", "choice", "NORMAL",
            "SQLite (WAL) fsync policy: NORMAL makes every acknowledged job survive any "
            "process crash (kill -9); FULL also survives an OS crash or power cut, at the price "
            "of an fsync per delivery (slow disks: long latency tails).",
            choices=("FULL", "NORMAL")),
    # --- deployment: candidate sandbox, scale-out engine (docs/deploy.md) -------------------
    Setting("sandbox", "choice", "auto", "How candidate code runs: subprocess (scrubbed "
            "environment), container (the runner image through a Docker-compatible engine), or "
            "auto (container when an engine answers and ATREX_RUNNER_IMAGE is set).",
            choices=("auto", "subprocess", "container")),
    Setting("runner_image", "str", None,
            "Image for sandboxed candidates (the Dockerfile's runner target), e.g. "
            "atrex-runner:0.1.0."),
    Setting("sandbox_memory", "str", "64g", "Memory limit of one candidate container."),
    Setting("sandbox_cpus", "float", 8.0, "CPU limit of one candidate container.", minimum=0.1),
    Setting("sandbox_pids", "int", 4096, "Process limit of one candidate container.",
            minimum=16),
    Setting("engine", "choice", "embedded", "Where jobs are queued: embedded (workers poll the "
            "job store; one host) or celery (job ids travel through ATREX_BROKER_URL to workers "
            "on any host; the store stays the record).", choices=("embedded", "celery")),
    Setting("broker_url", "str", None,
            "Celery broker for ATREX_ENGINE=celery: a Redis URL, e.g. redis://broker:6379/0."),
    Setting("gpu_kind", "str", None, "The GPU kind a Celery GPU worker serves (a repository's "
            "atrex.toml [repo] gpu, e.g. h200_sxm)."),
    Setting("visibility_timeout_s", "float", 21600.0, "Redis visibility timeout: an "
            "unacknowledged job id is delivered again after this long; keep it longer than the "
            "longest job.", minimum=60),
    Setting("redispatch_s", "float", 600.0, "Publish a job id again when the job is still "
            "queued this long after it was published (a lost message); duplicates are no-ops.",
            minimum=1),
    Setting("light_threads", "int", 4, "Concurrent GitHub-only jobs of a Celery light worker.",
            minimum=1),
    # --- history and dashboards (docs/dashboard.md) -----------------------------------------
    Setting("history_push", "bool", True,
            "Evaluate every push to a repository's default branch (all operators) for its "
            "history and dashboard; needs the App's Push event."),
    Setting("history_branch_days", "float", 0.0, "Days default-branch evaluations are kept "
            "in the history; 0 keeps them forever.", minimum=0),
    Setting("history_pr_days", "float", 90.0, "Days pull-request evaluations are kept in the "
            "history; 0 keeps them forever.", minimum=0),
    Setting("trend_points", "int", 10, "Default-branch evaluations the PR comment's trend "
            "shows per changed operator; 0 leaves the trend out.", minimum=0),
    Setting("public_url", "url", None, "Where users reach `atrex serve` (e.g. "
            "https://atrex.example.com): dashboard links in comments and the OAuth callback "
            "(PUBLIC_URL/oauth/callback); without it comments carry no dashboard link."),
    Setting("github_web_url", "url", None, "GitHub's web root, for sign-in and commit links; "
            "default: https://github.com, or https://HOST for ATREX_GITHUB_API_URL "
            "https://HOST/api/v3."),
    Setting("oauth_client_id", "str", None, "The GitHub App's Client ID (App settings page), "
            "for dashboard sign-in with GitHub; without it only secret links open dashboards."),
    Setting("oauth_client_secret", "str", None, "The GitHub App's client secret (App settings "
            "page, web process only).", secret=True),
    Setting("session_hours", "float", 8.0, "How long a dashboard sign-in lasts.",
            minimum=0.05),
)
_BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class BotConfig:
    app_id: int | None = None
    private_key_path: Path | None = None
    webhook_secret: str | None = field(default=None, repr=False)
    github_api_url: str = "https://api.github.com"
    database_url: str | None = None
    data_dir: Path = Path("atrex-data")
    check_name: str = "atrex"
    bot_login: str | None = None
    device: str = "auto"
    gpus: tuple[int, ...] = (0,)
    lease_s: float = 120.0
    heartbeat_s: float = 15.0
    poll_s: float = 1.0
    max_attempts: int = 3
    retry_backoff_s: float = 30.0
    run_drafts: bool = False
    optimize_runner: str | None = None
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = field(default=None, repr=False)
    agent_max_gpu_minutes: float = 30.0
    schedule_interval_s: float = 900.0
    http_retries: int = 5
    http_backoff_s: float = 1.0
    secondary_rate_wait_s: float = 60.0
    http_timeout_s: float = 30.0
    request_interval_s: float = 0.25
    write_interval_s: float = 1.0
    progress_interval_s: float = 30.0
    web_workers: int = 1
    web_threads: int = 8
    web_read_timeout_s: float = 10.0
    sqlite_synchronous: str = "NORMAL"
    sandbox: str = "auto"
    runner_image: str | None = None
    sandbox_memory: str = "64g"
    sandbox_cpus: float = 8.0
    sandbox_pids: int = 4096
    engine: str = "embedded"
    broker_url: str | None = None
    gpu_kind: str | None = None
    visibility_timeout_s: float = 21600.0
    redispatch_s: float = 600.0
    light_threads: int = 4
    history_push: bool = True
    history_branch_days: float = 0.0
    history_pr_days: float = 90.0
    trend_points: int = 10
    public_url: str | None = None
    github_web_url: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = field(default=None, repr=False)
    session_hours: float = 8.0

    @property
    def db_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'atrex-bot.db').resolve()}"

    @property
    def web_url(self) -> str:
        """GitHub's web root (sign-in, commit and pull request pages)."""
        if self.github_web_url:
            return self.github_web_url
        api = self.github_api_url.rstrip("/")
        if api == "https://api.github.com":
            return "https://github.com"
        return api.removesuffix("/api/v3")

    def dashboard_url(self, repo: str) -> str | None:
        return f"{self.public_url}/dashboard/{repo}" if self.public_url else None

    def require(self, *names: str) -> BotConfig:
        """Raise ConfigError for the first of `names` that has no value; return self."""
        for name in names:
            if getattr(self, name) in (None, ""):
                setting = _BY_NAME[name]
                raise ConfigError(setting.env, f"required: {setting.help}")
        if "private_key_path" in names:
            _check_private_key(self.private_key_path)
        if self.heartbeat_s >= self.lease_s:
            raise ConfigError("ATREX_HEARTBEAT_S", f"must be shorter than ATREX_LEASE_S "
                              f"({self.heartbeat_s:g} >= {self.lease_s:g})")
        return self

    def private_key(self) -> str:
        return self.require("private_key_path").private_key_path.read_text()

    def with_(self, **changes: Any) -> BotConfig:
        return replace(self, **changes)


def load_config(path: str | Path | None = None,
                env: Mapping[str, str] | None = None) -> BotConfig:
    """Settings from the TOML file (`path`, else $ATREX_CONFIG), overridden by ATREX_* variables."""
    env = os.environ if env is None else env
    path = path or env.get(CONFIG_ENV)
    values: dict[str, Any] = {}
    if path:
        values.update(_from_file(Path(path)))
    for setting in SETTINGS:
        if setting.env in env and env[setting.env] != "":
            values[setting.name] = _parse(setting, env[setting.env], setting.env)
    if "llm_api_key" not in values and env.get(OPENAI_KEY_ENV):
        values["llm_api_key"] = _parse(_BY_NAME["llm_api_key"], env[OPENAI_KEY_ENV],
                                       OPENAI_KEY_ENV)
    return BotConfig(**values)


def _from_file(path: Path) -> dict[str, Any]:
    where = f"{CONFIG_ENV} ({path})"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(where, "no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(where, f"not valid TOML: {exc}") from None
    table = data.get("bot", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [bot]", "must be a table")
    values = {}
    for key, raw in table.items():
        setting = _BY_NAME.get(key)
        if setting is None:
            raise ConfigError(f"{path}: bot.{key}", "unknown setting (known: "
                              + ", ".join(s.name for s in SETTINGS) + ")")
        values[key] = _parse(setting, raw, f"{path}: bot.{key}")
    return values


def _parse(setting: Setting, raw: Any, where: str) -> Any:
    parser = _PARSERS[setting.kind]
    try:
        value = parser(raw, setting)
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, str(exc)) from None
    if setting.minimum is not None and value < setting.minimum:
        raise ConfigError(where, f"must be >= {setting.minimum:g}, got {value!r}")
    return value


def _int(raw: Any, _s: Setting) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"must be an integer, got {raw!r}")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"must be an integer, got {raw!r}") from None


def _float(raw: Any, _s: Setting) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"must be a number, got {raw!r}")
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"must be a number, got {raw!r}") from None


def _bool(raw: Any, _s: Setting) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def _str(raw: Any, _s: Setting) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("must be a non-empty string")
    return raw.strip()


def _url(raw: Any, s: Setting) -> str:
    text = _str(raw, s).rstrip("/")
    if not text.startswith(("http://", "https://")):
        raise ValueError(f"must be an http(s) URL, got {raw!r}")
    return text


def _ints(raw: Any, _s: Setting) -> tuple[int, ...]:
    items = raw if isinstance(raw, list) else str(raw).split(",")
    try:
        values = tuple(int(str(v).strip()) for v in items if str(v).strip() != "")
    except ValueError:
        raise ValueError(f"must be comma-separated GPU indices, got {raw!r}") from None
    if not values or any(v < 0 for v in values) or len(set(values)) != len(values):
        raise ValueError(f"must be distinct non-negative GPU indices, got {raw!r}")
    return values


def _choice(raw: Any, s: Setting) -> str:
    text = _str(raw, s)
    for choice in s.choices:
        if text.lower() == choice.lower():
            return choice
    raise ValueError(f"must be one of {', '.join(s.choices)}, got {raw!r}")


_PARSERS: dict[str, Callable[[Any, Setting], Any]] = {
    "int": _int, "float": _float, "bool": _bool, "str": _str,
    "path": lambda raw, s: Path(_str(raw, s)).expanduser(), "url": _url, "ints": _ints,
    "choice": _choice,
}


def _check_private_key(path: Path) -> None:
    env = _BY_NAME["private_key_path"].env
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(env, f"cannot read {path}: {exc.strerror}") from None
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(env, f"{path} is not an unencrypted PEM private key ({exc})") from None


_REQUIRED = {"webhook_secret": "required by `serve`", "app_id": "required by `worker`",
             "private_key_path": "required by `worker`"}


def settings_table() -> str:
    """The Markdown table of settings for docs/bot.md (kept in sync by a test)."""
    rows = ["| variable | TOML key (`[bot]`) | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = _REQUIRED.get(s.name) or (
            "—" if s.default is None else ",".join(map(str, s.default))
            if isinstance(s.default, tuple) else str(s.default).lower()
            if isinstance(s.default, bool) else str(s.default))
        rows.append(f"| `{s.env}` | `{s.name}` | {default} | {s.help} |")
    return "\n".join(rows)

