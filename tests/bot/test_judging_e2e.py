"""A pull request cannot grade itself, end to end: the real server and worker, the strict GitHub
fake, real git repositories fetched over HTTPS, the runner on the CPU.

- A PR that rewrites the oracle together with its kernel (both scale the output by 1.5) passes by
  its own `reference.py` but not by the merge base's: the stricter verdict fails it.
- A PR that loosens a tolerance and a threshold, drops a shape and re-weights one is evaluated,
  its comment opens with those changes (old -> new), and its check run ends `action_required`
  until a maintainer approves that commit with `/atrex approve <sha>`; a reader's approval is
  refused; the approval gives the same check run its verdict without evaluating again.
"""

from __future__ import annotations

import json

import pytest
from atrex.bot.store import DONE, WAITING

from .conftest import APP_ID, bot_settings, process_env
from .github_fake import FakeGitHub
from .test_e2e import OWNER, World
from .world import ATREX_TOML, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(app_key, tmp_path_factory):
    base = tmp_path_factory.mktemp("judging")
    fake = FakeGitHub(APP_ID, app_key.public_key).start()
    env = process_env({**bot_settings(fake, app_key, base / "data"),
                       "ATREX_OPTIMIZE_RUNNER": "none"})
    w = World(base, fake, env)
    w.server.start()
    w.start_worker()
    yield w
    w.worker.stop()
    w.server.stop()
    w.store.close()
    fake.stop()


def _edit(kernels, rel: str, old: str, new: str) -> None:
    path = kernels.work / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new))


def _edit_json(kernels, rel: str, change) -> None:
    path = kernels.work / rel
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def test_a_kernel_graded_by_its_own_rewritten_oracle_fails_by_the_bases(world):
    kernels = world.repo("oracle")
    repo = f"{OWNER}/oracle"
    kernels.branch("scaled")
    _edit(kernels, "ops/rmsnorm/kernel.py", "out = x * inv_rms * w", "out = x * inv_rms * w * 1.5")
    _edit(kernels, "ops/rmsnorm/reference.py", "weight.to(compute)).to(x.dtype)",
          "weight.to(compute) * 1.5).to(x.dtype)")
    sha = kernels.commit("rmsnorm: scale by 1.5, and the reference with it")
    kernels.push("scaled")
    assert world.open_pr(kernels, 1, "scaled").status_code == 202
    world.wait_settled(repo)

    [run] = world.fake.runs_for(repo, sha)
    assert run["conclusion"] == "failure", run["output"]
    assert "fails the base's oracle" in run["output"]["title"]
    [sticky] = world.sticky(repo, 1)
    lines = sticky["body"].splitlines()
    listed = lines.index("### This pull request changes what judges its kernels")
    table = next(i for i, line in enumerate(lines) if line.startswith("| Operator"))
    assert listed < table and "- `rmsnorm` `reference.py`: changed" in lines
    assert "`rmsnorm` ❌ incorrect" in sticky["body"]
    assert "- `rmsnorm` shape `cpu-small`: incorrect" in sticky["body"]
    row = next(line for line in lines if line.startswith("| `rmsnorm`"))
    assert "✅ pass" in row and "by the base's oracle and rules: wrong results" in row
    [job] = world.jobs("evaluate", repo)
    stored = json.loads(world.store.effect(job.id, "reports"))
    assert stored["judging"]["head"]["ops"][0]["status"] == "incorrect"
    assert stored["head"]["ops"][0]["status"] == "pass"
    # the worker fetched over HTTPS with the installation token it minted
    fetches = world.fake.git_requests(repo)
    assert fetches and {status for *_, status, _ in fetches} == {200}
    assert all(world.fake.state.tokens[token].installation_id == 1 for *_, token in fetches)


def test_loosened_rules_wait_for_a_maintainers_approval_of_that_commit(world):
    kernels = world.repo("looser")
    repo = f"{OWNER}/looser"
    kernels.branch("loosen")
    (kernels.work / "atrex.toml").write_text(
        ATREX_TOML.replace("regression = 0.05", "regression = 0.25")
        + "\n[tolerances.bfloat16]\natol = 0.5\n")
    _edit_json(kernels, "ops/rmsnorm/shapes.json", lambda d: d.pop("prefill-8192"))
    _edit_json(kernels, "ops/rmsnorm/metadata.json", lambda d: (
        d["shapes"].pop("prefill-8192"), d["shapes"]["decode-64"].update(call_count=4096)))
    kernels.edit_kernel("tuned")
    sha = kernels.commit("rmsnorm: tuned; looser rules")
    kernels.push("loosen")
    world.fake.set_permission(repo, "maintainer", "write")
    world.fake.set_permission(repo, "reader", "read")
    assert world.open_pr(kernels, 2, "loosen").status_code == 202
    world.wait_settled(repo)

    [job] = world.jobs("evaluate", repo)
    assert job.state == WAITING and job.payload["stage"] == "publish"
    [run] = world.fake.runs_for(repo, sha)
    assert run["status"] == "completed" and run["conclusion"] == "action_required"
    assert run["output"]["title"].startswith("Needs a maintainer's approval")
    [sticky] = world.sticky(repo, 2)
    body = sticky["body"]
    assert body.splitlines()[1] == "## atrex · ⏸️ action required"
    for line in ("- `atrex.toml` `thresholds.regression`: `0.05` -> `0.25`; looser ⚠️",
                 "- `atrex.toml` `tolerances.bfloat16.atol`: `0.01` -> `0.5`; looser ⚠️",
                 "- `rmsnorm` `shape decode-64 weight`: `256` -> `4096`; re-weighted ⚠️"):
        assert line in body.splitlines(), body
    assert "`rmsnorm` `shape prefill-8192`: was" in body and "dropped ⚠️" in body
    assert "`rmsnorm` ✅ pass" in body  # the head kernel, by the base's oracle and rules
    assert f"`/atrex approve {sha}`" in body

    refused, _ = world.comment(repo, 2, "reader", f"/atrex approve {sha}")
    world.wait_settled(repo)
    assert world.store.get(job.id).state == WAITING
    assert world.fake.reactions_on(refused["id"]) == ["eyes", "-1"]

    fetched = len(world.fake.git_requests(repo))
    approval, _ = world.comment(repo, 2, "maintainer", f"/atrex approve {sha[:10]}")
    wait_for(lambda: world.store.get(job.id).state == DONE, timeout=120,
             what=f"the approved publication\n{world.logs()}")
    [run] = world.fake.runs_for(repo, sha)  # the same check run, now with the verdict
    verdict = world.store.get(job.id).result["conclusion"]
    assert run["conclusion"] == verdict and verdict in ("success", "neutral")  # neutral: no GPU
    assert [c for _, c in run["_history"]][-2:] == ["action_required", verdict]
    [sticky] = world.sticky(repo, 2)
    assert "action required" not in sticky["body"].splitlines()[1]
    assert f"✅ Approved for `{sha[:12]}` by @maintainer." in sticky["body"]
    assert sorted(world.fake.reactions_on(approval["id"])) == ["+1", "eyes"]
    assert any("Approved the changes to what judges the kernels" in c["body"]
               for c in world.fake.comments_on(repo, 2, world.fake.bot_login))
    assert len(world.fake.git_requests(repo)) == fetched  # published again, not evaluated
