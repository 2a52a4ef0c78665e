"""``atrex optimize``: the command line of the agent.

``register(subparsers)`` adds the ``optimize`` subcommand to the composition root's parser; its
``func(args)`` returns the exit code: 0 when the final kernel is verified, 1 when no verified kernel
exists (a broken baseline nothing could fix), 2 for a usage or repository-format error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from atrex.runner.errors import FormatError
from atrex.runner.repo import load_repo

from .config import OptimizeConfig, agent_table
from .kb import KbError
from .proposers import LlmSettings, parse_proposers


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "optimize", help="run the profiling-driven optimization loop on one operator",
        description="Baseline -> profile -> retrieve -> propose one change -> verify and time "
        "against the incumbent (runner) -> accept only a significant gain. Writes kernel.py "
        "(the incumbent) and attempts.jsonl to --out. The LLM API key comes from OPENAI_API_KEY.")
    p.add_argument("path", help="kernel repository (or one operator directory)")
    p.add_argument("--op", required=True, help="operator to optimize")
    p.add_argument("--proposer", action="append", metavar="NAME",
                   help="llm, autotune or kb; repeat or comma-separate for a rotation "
                   "(default: autotune,kb; llm,autotune,kb when --model is given)")
    p.add_argument("--max-iters", type=int, help="proposal rounds (default 8)")
    p.add_argument("--gpu-minutes", type=float, help="device-time budget (default 10)")
    p.add_argument("--max-tokens", type=int, help="LLM token budget (default 200000)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint for the llm proposer")
    p.add_argument("--model", help="model name for the llm proposer")
    p.add_argument("--out", type=Path, help="output directory (default out/optimize/<op>)")
    p.add_argument("--seed", type=int, default=0, help="seed of dropout (default 0)")
    p.add_argument("--target", type=float, help="stop at this roofline fraction (default 0.9)")
    p.add_argument("--dropout-after", type=int,
                   help="rounds without a gain before optimization dropout (default 3)")
    p.add_argument("--autotune-batch", type=int, help="settings per autotune round (default 4)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to run (default auto: cuda when a GPU is visible, else cpu)")
    p.add_argument("--device-index", type=int, default=0, metavar="N",
                   help="CUDA device index (default 0)")
    p.add_argument("--ncu", choices=("auto", "off"), default="auto",
                   help="profile with Nsight Compute on a GPU when it works (default auto)")
    p.add_argument("--timing-max-seconds", type=float, default=10.0,
                   help="cap on the runner's adaptive timing per shape (default 10)")
    p.add_argument("--trials", type=int, help="correctness draws per shape (default: atrex.toml)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    pr = p.add_argument_group("pull request")
    pr.add_argument("--open-pr", action="store_true",
                    help="commit the winner on atrex/optimize/<op>, push, open or update the PR "
                    "(token from GITHUB_TOKEN)")
    pr.add_argument("--base-branch", help="PR base (default: the repository's default branch)")
    pr.add_argument("--github-repo", help="owner/name (default: parsed from the remote URL)")
    pr.add_argument("--github-api-url", default=os.environ.get("GITHUB_API_URL",
                                                               "https://api.github.com"),
                    help="GitHub REST API root (default: $GITHUB_API_URL, else "
                    "https://api.github.com)")
    pr.add_argument("--remote", default="origin",
                    help="git remote to push the branch to (default origin)")
    p.set_defaults(func=run)
    return p


def build_config(args: argparse.Namespace, settings: dict) -> OptimizeConfig:
    model = args.model or settings.get("model")
    base_url = args.base_url or settings.get("base_url")
    llm = LlmSettings(model=model, base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY")) \
        if model else None
    config = OptimizeConfig(
        op=args.op, proposers=parse_proposers(args.proposer or settings.get("proposers"),
                                              llm is not None),
        seed=args.seed, device=args.device, device_index=args.device_index, ncu=args.ncu,
        timing_max_seconds=args.timing_max_seconds, trials=args.trials, llm=llm)
    pairs = (("max_iters", "max_iters", "max_iters"), ("gpu_minutes", "gpu_minutes",
                                                       "gpu_minutes"),
             ("max_tokens", "max_tokens", "max_tokens"), ("target", "target", "target_fraction"),
             ("dropout_after", "dropout_after", "dropout_after"),
             ("autotune_batch", "autotune_batch", "autotune_batch"))
    for arg, key, attr in pairs:
        value = getattr(args, arg)
        value = value if value is not None else settings.get(key)
        if value is not None:
            setattr(config, attr, value)
    return config


def run(args: argparse.Namespace) -> int:
    from .loop import optimize
    from .progress import make_display

    try:
        repo = load_repo(args.path, [args.op])
        config = build_config(args, agent_table(repo.config.agent, repo.config.path))
        config.check()
    except (FormatError, KbError, ValueError) as exc:
        print(f"atrex optimize: {exc}", file=sys.stderr)
        return 2
    out = args.out or Path("out") / "optimize" / args.op
    try:
        result = optimize(args.path, config, out, display=make_display(args.quiet))
    except (FormatError, KbError) as exc:
        print(f"atrex optimize: {exc}", file=sys.stderr)
        return 2
    if args.open_pr:
        code = _open_pr(args, result)
        if code:
            return code
    return 0 if result.after.passed else 1


def _open_pr(args: argparse.Namespace, result) -> int:
    if not result.improved:
        print("atrex optimize: no verified improvement, no pull request", file=sys.stderr)
        return 0
    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        print("atrex optimize: --open-pr needs GITHUB_TOKEN", file=sys.stderr)
        return 2
    from .api import OptimizeRequest, _publish_request
    from .github import PyGithubClient
    from .pr import publish

    github = PyGithubClient.from_token(token, args.github_api_url)
    repo_name = args.github_repo or repo_from_remote(Path(args.path), args.remote)
    if repo_name is None:
        print("atrex optimize: cannot tell the GitHub repository; pass --github-repo",
              file=sys.stderr)
        return 2
    base = args.base_branch or github.default_branch(repo_name)
    request = OptimizeRequest(checkout=Path(args.path), repo_full_name=repo_name,
                              out_dir=result.out_dir, trigger="cli", remote=args.remote)
    outcome = publish(_publish_request(request, result, base), github)
    print(f"pull request {outcome.action}: {outcome.url}", file=sys.stderr)
    return 0


# https://host/owner/name(.git), ssh://git@host/owner/name, git@host:owner/name(.git)
_REMOTE = re.compile(r"^(?:[a-z+]+://(?:[^@/]+@)?[^/]+/|[^@/\s]+@[^:/\s]+:)"
                     r"(?P<repo>[^/\s]+/[^/\s]+?)(?:\.git)?/?$")


def parse_repo_url(url: str) -> str | None:
    """owner/name from a GitHub remote URL; None for local paths and anything else."""
    match = _REMOTE.match(url.strip())
    return match.group("repo") if match else None


def repo_from_remote(path: Path, remote: str) -> str | None:
    import git

    try:
        url = git.Repo(path, search_parent_directories=True).remote(remote).url
    except (git.exc.GitError, ValueError):
        return None
    return parse_repo_url(url)
