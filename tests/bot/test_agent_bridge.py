"""The bot's bridge to the agent, in-process: `[agent]` validation, LLM and budget settings, the
reply in the PR thread, fork PRs, one open PR per operator, and the scheduled ranking. The agent
itself is replaced by a recorder here; test_agent_e2e.py runs the real one end to end."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
from atrex.agent.api import OpOutcome, OptimizeOutcome
from atrex.agent.github import PullRef
from atrex.agent.pr import PublishOutcome
from atrex.bot.agent_bridge import AgentBridge, ConfigProblem, choose_ops
from atrex.bot.config import load_config
from atrex.bot.jobs import OptimizeRequest, ScheduledRequest
from atrex.bot.schedule import Schedule
from atrex.runner.model import DeviceInfo, OpResult, Report, Status

ROOT = Path(__file__).resolve().parents[2]
NAIVE = ROOT / "benchmarks" / "agent_naive"
REPO = "octo/kernels"


def make_repo(path: Path, toml: str, ops=("rmsnorm",)) -> Path:
    for op in ops:
        shutil.copytree(NAIVE / op, path / "ops" / op)
    (path / "atrex.toml").write_text('[repo]\nops_root = "ops"\n\n' + toml)
    return path


def bot_config(**env) -> object:
    return load_config(env={f"ATREX_{k.upper()}": str(v) for k, v in env.items()})


class Client:
    """atrex.agent.github.GitHubClient with canned open PRs."""

    def __init__(self, open_pulls: dict[str, PullRef] | None = None):
        self.open_pulls = open_pulls or {}

    def find_open_pull(self, repo, head_branch, marker):
        return self.open_pulls.get(head_branch.rsplit("/", 1)[-1])


class Agent:
    """Stands in for agent.api.run_optimize_job and records its requests."""

    def __init__(self, outcome=None):
        self.requests = []
        self.outcome = outcome or (lambda request: OpOutcome(op=request.ops[0]))

    def __call__(self, request, github, report=None, timer=None):
        self.requests.append((request, report, timer))
        return OptimizeOutcome(ops=[self.outcome(request)])


def request_for(workdir: Path, ops, head_repo: str = REPO) -> OptimizeRequest:
    return OptimizeRequest(
        repo=REPO, pr=7, head_sha="a" * 40, head_ref="tune", head_repo=head_repo,
        base_ref="main", ops=list(ops), workdir=workdir, requested_by="maintainer",
        device="cpu", device_index=0, github=object(), token=lambda: "ghs_x",
        progress=lambda line: None)


TABLE = "| | before | after |\n|---|---|---|\n| status | pass | pass |"


def opened(request):
    return OpOutcome(op=request.ops[0], improved=True, stop_reason="iteration budget spent (1)",
                     summary={"final_decision": "accepted: 50.0% faster than the incumbent",
                              "after": {"timing_source": "injected"}}, table=TABLE,
                     pr=PublishOutcome("opened", 12, "https://github.example/octo/kernels/pull/12",
                                       "atrex/optimize/rmsnorm", "c" * 40,
                                       title="atrex: faster `rmsnorm` kernel", base="tune"))


@pytest.mark.parametrize("toml, words", [
    ('[agent]\nmax_iters = "many"\n', "`agent.max_iters` in `atrex.toml`: must be of type int"),
    ("[agent]\nbudget = 3\n", "`agent.budget` in `atrex.toml`: unknown key"),
    ('[agent]\nproposers = ["gpt"]\n', "`agent.proposers` in `atrex.toml`: unknown proposer"),
    ("[agent]\ngpu_minutes = 0\n", "`agent.gpu_minutes` in `atrex.toml`: must be > 0"),
    ("[agent]\ntarget = 2.0\n", "`agent.target` in `atrex.toml`: must be in (0, 1.5]"),
    ("[agents]\nmax_iters = 1\n", "`agents` in `atrex.toml`: unknown key"),
])
def test_repository_agent_settings_are_validated_with_the_field_named(tmp_path, toml, words):
    bridge = AgentBridge(bot_config(), run_job=Agent())
    workdir = make_repo(tmp_path / "repo", toml)
    with pytest.raises(ConfigProblem, match=None) as caught:
        bridge.plan(workdir)
    assert words in str(caught.value)
    result = bridge.optimize(request_for(workdir, ["rmsnorm"]))
    assert result["reaction"] == "confused" and words in result["summary"]
    assert "Nothing ran" in result["summary"] and result["pr_url"] is None


def test_llm_only_with_an_installation_endpoint_and_never_the_repos_url(tmp_path):
    workdir = make_repo(tmp_path / "repo", '[agent]\nproposers = ["llm", "kb"]\n'
                        'model = "repo-model"\nbase_url = "https://attacker.example/v1"\n')
    plain = AgentBridge(bot_config()).plan(workdir)
    assert plain.proposers == ["kb"] and plain.llm is None
    assert any("`llm` proposer was skipped" in n for n in plain.notes)
    assert any("`agent.base_url` is ignored" in n for n in plain.notes)

    config = bot_config(llm_base_url="https://llm.internal/v1", llm_model="house-model",
                        llm_api_key="sk-test")
    planned = AgentBridge(config).plan(workdir)
    assert planned.proposers == ["llm", "kb"]
    assert (planned.llm.model, planned.llm.base_url, planned.llm.api_key) == (
        "repo-model", "https://llm.internal/v1", "sk-test")
    default = AgentBridge(config).plan(make_repo(tmp_path / "r2", ""))
    assert default.proposers == ["llm", "autotune", "kb"] and default.llm.model == "house-model"
    assert AgentBridge(bot_config()).plan(make_repo(tmp_path / "r3", "")).proposers == [
        "autotune", "kb"]


def test_gpu_minutes_are_capped_by_the_installation(tmp_path):
    workdir = make_repo(tmp_path / "repo", "[agent]\ngpu_minutes = 500\n")
    plan = AgentBridge(bot_config(agent_max_gpu_minutes=20)).plan(workdir)
    assert plan.gpu_minutes == 20 and "above this installation's limit" in plan.notes[0]
    assert AgentBridge(bot_config()).plan(make_repo(tmp_path / "r2", "")).gpu_minutes is None
    small = AgentBridge(bot_config(agent_max_gpu_minutes=4)).plan(make_repo(tmp_path / "r3", ""))
    assert small.gpu_minutes == 4 and not small.notes  # the agent's default (10) is capped too


def test_reply_links_the_follow_up_pr_with_its_table(tmp_path):
    workdir = make_repo(tmp_path / "repo", "[agent]\nmax_iters = 1\n")
    agent = Agent(opened)
    result = AgentBridge(bot_config(), timer="TIMER", run_job=agent,
                         client=lambda gh: Client()).optimize(request_for(workdir, ["rmsnorm"]))
    [(sent, report, timer)] = agent.requests
    assert (sent.ops, sent.base_branch, sent.trigger, sent.pr_number, sent.open_pr) == (
        ["rmsnorm"], "tune", "command", 7, True)
    assert sent.proposers == ["autotune", "kb"] and sent.llm is None and timer == "TIMER"
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    subprocess.run(["git", "-C", str(workdir), "remote", "add", "origin",
                    "https://github.example/octo/kernels.git"], check=True)
    env = sent.git_env()  # the push authenticates with the installation token, via env only
    assert env["GIT_CONFIG_KEY_0"] == "http.extraHeader"
    assert base64.b64encode(b"x-access-token:ghs_x").decode() in env["GIT_CONFIG_VALUE_0"]
    body = result["summary"]
    assert result["reaction"] == "rocket" and result["pr_url"].endswith("/pull/12")
    assert "### `rmsnorm`: opened #12" in body and TABLE in body
    assert "[atrex: faster `rmsnorm` kernel](https://github.example/octo/kernels/pull/12)" in body
    assert "branch `atrex/optimize/rmsnorm` into `tune`" in body
    assert "Accepted: 50.0% faster" in body and "injected by a test harness" in body
    assert result["prs"] == [{"op": "rmsnorm", "action": "opened", "number": 12,
                              "url": "https://github.example/octo/kernels/pull/12"}]


def test_no_gain_unknown_op_and_errors_are_explained(tmp_path):
    workdir = make_repo(tmp_path / "repo", "", ops=("rmsnorm", "softmax"))

    def outcome(request):
        if request.ops[0] == "softmax":
            return OpOutcome(op="softmax", error="RuntimeError: the GPU fell off the bus")
        return OpOutcome(op="rmsnorm", stop_reason="GPU budget spent (10.0 of 10 min)",
                         summary={"final_decision": "no candidate beat the baseline; the kernel "
                                  "is unchanged"})

    bridge = AgentBridge(bot_config(), run_job=Agent(outcome), client=lambda gh: Client())
    result = bridge.optimize(request_for(workdir, ["rmsnorm", "softmax", "gemm"]))
    body = result["summary"]
    assert "### `rmsnorm`: no pull request (no significant gain)" in body
    assert "No candidate beat the baseline" in body and "GPU budget spent" in body
    assert "### `softmax`: failed" in body and "fell off the bus" in body
    assert "### `gemm`: failed" in body and "No such operator" in body
    assert result["reaction"] == "rocket" and result["pr_url"] is None

    only_bad = bridge.optimize(request_for(workdir, ["gemm"]))
    assert only_bad["reaction"] == "confused"


def test_fork_pull_requests_get_the_diff_instead_of_a_branch(tmp_path):
    workdir = make_repo(tmp_path / "repo", "")
    out = tmp_path / "agent-out"
    out.mkdir()
    faster = (workdir / "ops/rmsnorm/kernel.py").read_text().replace("BLOCK_SIZE = 64",
                                                                      "BLOCK_SIZE = 256")
    (out / "kernel.py").write_text(faster)

    def outcome(request):
        assert request.open_pr is False
        return OpOutcome(op="rmsnorm", improved=True, out_dir=out, table=TABLE,
                         summary={"final_decision": "accepted: 50.0% faster"})

    client = Client({"rmsnorm": PullRef(3, "u", "atrex/optimize/rmsnorm", "main")})
    result = AgentBridge(bot_config(), run_job=Agent(outcome), client=lambda gh: client) \
        .optimize(request_for(workdir, ["rmsnorm"], head_repo="contributor/kernels"))
    body = result["summary"]
    assert "faster kernel found, no pull request" in body and "comes from a fork" in body
    assert "-BLOCK_SIZE = 64\n+BLOCK_SIZE = 256" in body
    assert "a/ops/rmsnorm/kernel.py" in body and TABLE in body and result["pr_url"] is None


def test_an_open_atrex_pr_into_another_branch_is_left_alone(tmp_path):
    workdir = make_repo(tmp_path / "repo", "")
    agent = Agent(opened)
    client = Client({"rmsnorm": PullRef(3, "https://x/pull/3", "atrex/optimize/rmsnorm", "main")})
    result = AgentBridge(bot_config(), run_job=agent, client=lambda gh: client) \
        .optimize(request_for(workdir, ["rmsnorm"]))
    assert agent.requests == [] and "### `rmsnorm`: not run" in result["summary"]
    assert "#3, into `main`" in result["summary"]

    same = Client({"rmsnorm": PullRef(12, "u", "atrex/optimize/rmsnorm", "tune")})
    AgentBridge(bot_config(), run_job=agent, client=lambda gh: same) \
        .optimize(request_for(workdir, ["rmsnorm"]))
    assert len(agent.requests) == 1  # same target: the agent updates that PR


def _report(stakes: dict[str, tuple[float | None, float | None]], status=None) -> Report:
    """ops -> (importance, gpu-hours at stake)."""
    ops = [OpResult(name=name, status=(status or {}).get(name, Status.PASS),
                    importance=importance, gpu_hours_at_stake=hours,
                    score=None if hours is None else 0.5)
           for name, (importance, hours) in stakes.items()]
    return Report(device=DeviceInfo(kind="cpu", name="cpu"), ops=ops,
                  timing_available=all(h is not None for _, h in stakes.values()))


def test_scheduled_choice_ranks_filters_and_respects_max_prs():
    open_prs = {"b": PullRef(4, "u", "atrex/optimize/b", "main")}
    timed = _report({"a": (0.1, 3.0), "b": (0.5, 9.0), "c": (0.2, 5.0), "d": (0.2, 1.0),
                     "e": (0.9, 50.0)}, status={"e": Status.INCORRECT})
    choice = choose_ops(timed, Schedule(enabled=True, max_prs=2, ops=("a", "b", "d")),
                        open_prs.get)
    assert [s.op for s in choice.ranked] == ["b", "c", "a", "d"]  # failing ops are not ranked
    assert [s.op for s in choice.chosen] == ["a", "d"] and choice.timed
    assert choice.skipped == {"b": "open atrex pull request #4", "c": "not in [schedule] ops"}
    assert "GPU-hours at stake" in choice.pr_note(choice.chosen[0])
    assert "rank 3 of 4" in choice.pr_note(choice.chosen[0])

    untimed = _report({"a": (0.1, None), "b": (0.5, None), "c": (0.3, None)})
    choice = choose_ops(untimed, Schedule(enabled=True), open_prs.get)
    assert [s.op for s in choice.chosen] == ["c"] and not choice.timed
    assert "nothing was timed on this machine" in choice.log_lines()[0]
    assert "ranked by importance" in choice.pr_note(choice.chosen[0])


def test_scheduled_run_targets_the_default_branch(tmp_path):
    workdir = make_repo(tmp_path / "repo", "[schedule]\nenabled = true\nmax_prs = 1\n",
                        ops=("rmsnorm", "softmax"))
    agent = Agent(opened)
    report = _report({"rmsnorm": (0.7, None), "softmax": (0.3, None)})
    evaluations, recorded = [], []

    def evaluate(repo, options):
        evaluations.append(options)
        return report

    bridge = AgentBridge(bot_config(), run_job=agent, evaluate=evaluate,
                         client=lambda gh: Client())
    result = bridge.scheduled(ScheduledRequest(
        repo=REPO, default_branch="main", head_sha="b" * 40, workdir=workdir,
        out_dir=tmp_path / "out", device="cpu", device_index=0, github=object(),
        token=lambda: "t", record_choice=recorded.append))
    [(sent, passed_report, _)] = agent.requests
    assert sent.ops == ["rmsnorm"] and sent.base_branch == "main" and sent.trigger == "schedule"
    assert passed_report is report and "ranked by importance" in sent.pr_note
    assert result["chosen"] == ["rmsnorm"] and result["prs"][0]["number"] == 12
    assert [c["chosen"] for c in recorded] == [["rmsnorm"]] and len(evaluations) == 1

    # an attempt after a crash runs what the first one chose (whose PR is open by now: updated)
    client = Client({"rmsnorm": PullRef(12, "u", "atrex/optimize/rmsnorm", "main")})
    resumed = AgentBridge(bot_config(), run_job=agent, evaluate=evaluate,
                          client=lambda gh: client).scheduled(ScheduledRequest(
                              repo=REPO, default_branch="main", head_sha="b" * 40,
                              workdir=workdir, out_dir=tmp_path / "out2", device="cpu",
                              device_index=0, github=object(), token=lambda: "t",
                              choice=recorded[0]))
    assert len(evaluations) == 1 and agent.requests[-1][0].ops == ["rmsnorm"]
    assert resumed["chosen"] == ["rmsnorm"] and resumed["ranked"] == ["rmsnorm", "softmax"]
    assert agent.requests[-1][0].pr_note == sent.pr_note

    off = make_repo(tmp_path / "off", "[schedule]\nenabled = false\n")
    request = ScheduledRequest(repo=REPO, default_branch="main", head_sha="b" * 40,
                               workdir=off, out_dir=tmp_path / "o2", device="cpu",
                               device_index=0, github=object(), token=lambda: "t")
    assert "no longer opts in" in bridge.scheduled(request)["note"]
    bad = make_repo(tmp_path / "bad", "[schedule]\nenabled = true\nevery_hours = 0\n")
    request.workdir = bad
    assert "`schedule.every_hours` in `atrex.toml`" in bridge.scheduled(request)["error"]


def test_the_default_worker_runtime_wires_the_bundled_agent(config, monkeypatch):
    import sys

    from atrex.bot.worker import build_runtime

    config.data_dir.mkdir(parents=True, exist_ok=True)
    runtime = build_runtime(config)
    assert isinstance(runtime.optimize_runner.__self__, AgentBridge)
    assert runtime.scheduled_runner.__self__ is runtime.optimize_runner.__self__
    assert runtime.optimize_runner.__self__.timer is None  # production never injects a timer
    off = build_runtime(config.with_(optimize_runner="none"))
    assert off.optimize_runner is None and off.scheduled_runner is not None
    named = build_runtime(config.with_(optimize_runner="tests.bot.test_agent_bridge:make_repo"))
    assert named.optimize_runner is make_repo

    monkeypatch.delitem(sys.modules, "atrex.bot.agent_bridge")
    monkeypatch.setitem(sys.modules, "atrex.agent.api", None)  # the agent is not installed
    bare = build_runtime(config)
    assert bare.optimize_runner is None and bare.scheduled_runner is None


def test_secrets_the_bot_holds_never_reach_candidate_code(tmp_path):
    from atrex.bot.config import SETTINGS, load_config
    from atrex.bot.gitwork import auth_env
    from atrex.runner.sandbox import scrubbed_env

    env = {s.env: "value" for s in SETTINGS}
    env.update(OPENAI_API_KEY="sk-secret", GITHUB_TOKEN="ghs_x", PATH="/usr/bin",
               **auth_env("https://github.com/octo/kernels.git", "ghs_y"))
    assert load_config(env={"OPENAI_API_KEY": "sk-secret"}).llm_api_key == "sk-secret"
    sandbox = scrubbed_env("cpu", 0, tmp_path, source=env)
    assert not [k for k in sandbox if k.startswith(("ATREX_", "OPENAI", "GITHUB", "GIT_"))]
    assert sandbox["PATH"] == "/usr/bin"
