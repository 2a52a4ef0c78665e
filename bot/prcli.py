"""`atrex pr-report` and `atrex pr-comment`: the App's pull-request evaluation, from a workflow.

`pr-report` evaluates a local checkout's head against its merge base exactly as the App's GPU lane
does (`atrex.bot.prcheck`) and writes the App's sticky comment body, the PR result as JSON (the
App's checkpoint format), the roofline plot and `conclusion=...` lines for $GITHUB_OUTPUT. Exit
codes: 0 success or neutral, 1 failure (the check run's rules) or action_required (the PR changes
what judges its kernels in a way only a maintainer may accept: bot.judging), 2 a usage or checkout
error.

`pr-comment` renders the sticky comment from that JSON and creates or edits it on the pull request
(found again by the App's hidden marker), with the token in $GITHUB_TOKEN; it never runs PR code,
so a `workflow_run` job can post results of a fork's pull request (see docs/deploy.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
ACTIONS_LOGIN = "github-actions[bot]"


def register(subparsers: argparse._SubParsersAction) -> None:
    report = subparsers.add_parser(
        "pr-report", help="evaluate a PR's changed operators against the merge base (Action)",
        description="Evaluate the operators changed between the merge base of --base and "
        "--head, head and base interleaved, and render the GitHub App's sticky comment and "
        "verdict.")
    report.add_argument("path", nargs="?", default=".",
                        help="the kernel repository (inside a git checkout; default .)")
    report.add_argument("--base", required=True, help="base commit or ref (the PR's base)")
    report.add_argument("--head", default="HEAD", help="head commit or ref (default HEAD)")
    report.add_argument("--json", type=Path, metavar="FILE",
                        help="write the PR result (JSON; `-`: standard output)")
    report.add_argument("--markdown", type=Path, metavar="FILE",
                        help="write the sticky comment body (Markdown; `-`: standard output)")
    report.add_argument("--plot", type=Path, metavar="FILE",
                        help="write the roofline chart, base and head (PNG; `-`: standard output)")
    report.add_argument("--bars", type=Path, metavar="FILE",
                        help="write the roofline fraction per operator and shape, base vs head, "
                        "sorted by GPU-hours at stake (PNG; `-`: standard output)")
    report.add_argument("--outputs", type=Path, metavar="FILE",
                        help="append conclusion=/title=/ops= lines (e.g. $GITHUB_OUTPUT; `-`: "
                        "standard output)")
    report.add_argument("--regression", type=_fraction, metavar="X",
                        help="largest allowed drop of an op's GPU-hour score (default: "
                        "atrex.toml thresholds.regression)")
    report.add_argument("--gpu-kind", metavar="KIND",
                        help="fail unless the GPU is of this kind (e.g. h200_sxm)")
    report.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where to run (default auto: cuda when a GPU is visible, else cpu)")
    report.add_argument("--device-index", type=int, default=0, metavar="N",
                        help="CUDA device index (default 0)")
    report.add_argument("--sandbox", choices=("auto", "subprocess", "container"),
                        default=os.environ.get("ATREX_SANDBOX", "auto"),
                        help="how candidates run: subprocesses, or a container with no network "
                        "(default: $ATREX_SANDBOX, else auto; docs/deploy.md)")
    report.add_argument("--runner-image", default=os.environ.get("ATREX_RUNNER_IMAGE"),
                        metavar="IMAGE",
                        help="image for --sandbox container (default: $ATREX_RUNNER_IMAGE)")
    report.set_defaults(func=cmd_pr_report)

    comment = subparsers.add_parser(
        "pr-comment", help="create or update the sticky PR comment from a pr-report JSON",
        description="Render the sticky comment from `atrex pr-report --json` and create or edit "
        "it on the pull request. The token comes from $GITHUB_TOKEN.")
    comment.add_argument("result", type=Path, help="the JSON written by pr-report --json")
    comment.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY"),
                         help="owner/name (default $GITHUB_REPOSITORY)")
    comment.add_argument("--pr", type=int, help="pull request number (default: from "
                         "$GITHUB_EVENT_PATH)")
    comment.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL",
                                                             "https://api.github.com"),
                         help="GitHub REST API root (default: $GITHUB_API_URL, else "
                         "https://api.github.com)")
    comment.add_argument("--author", default=ACTIONS_LOGIN,
                         help=f"login whose comment carries the marker (default {ACTIONS_LOGIN})")
    comment.add_argument("--expect-head-sha", metavar="SHA",
                         help="post only if the PR's head is this commit and the result is for it")
    comment.set_defaults(func=cmd_pr_comment)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def _error(command: str, message: str) -> int:
    print(f"atrex {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


# --- pr-report ---------------------------------------------------------------------------------

def cmd_pr_report(args: argparse.Namespace) -> int:
    from atrex.runner.evaluate import EvalOptions, evaluate
    from atrex.runner.output import human_stream, stdout_conflict

    from .gitwork import CheckoutError
    from .prcheck import sandbox_launcher

    if problem := stdout_conflict(_documents(args)):
        return _error("pr-report", problem)
    try:
        launcher = sandbox_launcher(args.sandbox, args.runner_image)
    except ValueError as exc:
        return _error("pr-report", str(exc))
    options = EvalOptions(device=args.device, device_index=args.device_index, launcher=launcher)
    if args.gpu_kind and (problem := _gpu_mismatch(options, args.gpu_kind)):
        return _error("pr-report", problem)
    work = Path(tempfile.mkdtemp(prefix="atrex-pr-"))
    try:
        result = _evaluate(args, options, evaluate, work)
    except CheckoutError as exc:
        return _error("pr-report", str(exc))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = _without_approvals(result)
    _write_report(result, args)
    print(f"atrex pr-report: {result.judgement.conclusion}: {result.judgement.title}",
          file=human_stream(_documents(args)))
    return EXIT_FAILURE if result.judgement.conclusion in ("failure", "action_required") \
        else EXIT_OK


def _without_approvals(result):
    """The Action has no `/atrex approve`: a change to what judges a kernel that needs a
    maintainer's approval ends as `action_required` (a failed step)."""
    import dataclasses

    from .prcheck import gated

    if result.judging is not None:
        result = dataclasses.replace(
            result, judging=dataclasses.replace(result.judging, approvable=False))
    return gated(result, None)


def _documents(args: argparse.Namespace) -> dict:
    return {"--json": args.json, "--markdown": args.markdown, "--plot": args.plot,
            "--bars": args.bars, "--outputs": args.outputs}


def _gpu_mismatch(options, kind: str) -> str | None:
    if options.resolved_device() != "cuda":
        print(f"atrex pr-report: note: no GPU visible; --gpu-kind {kind} not checked",
              file=sys.stderr)
        return None
    from atrex.runner.peaks import detect_device

    found = detect_device("cuda", options.device_index, kind).gpu_key
    return None if found == kind else f"--gpu-kind {kind}: this runner's GPU is {found}"


def _evaluate(args, options, evaluate, work: Path):
    from atrex.runner.errors import FormatError

    from .prcheck import evaluate_checkout, local_checkout
    from .render import PrResult
    from .verdict import FAILURE, Judgement

    checkout = local_checkout(Path(args.path), args.base, args.head, work)
    try:
        return evaluate_checkout(checkout, options, evaluate, _progress,
                                 regression=args.regression)
    except FormatError as exc:  # the App's rule: the repository could not be evaluated
        return PrResult(checkout.head_sha, checkout.base_sha,
                        Judgement(FAILURE, "The repository could not be evaluated"),
                        error=str(exc))


def _progress(op: str, shape: str | None, label: str | None) -> None:
    print(f"atrex pr-report: {op} / {shape or 'load'} / {label or '-'}", file=sys.stderr,
          flush=True)


def _write_report(result, args: argparse.Namespace) -> None:
    from atrex.runner.output import is_stdout, write_text

    from .prcheck import result_to_dict
    from .render import comment_body

    if args.json:
        write_text(args.json, json.dumps(result_to_dict(result), indent=2) + "\n")
    if args.markdown:
        write_text(args.markdown, comment_body(result, full_report=artifact_location()) + "\n")
    if result.head is not None and (args.plot or args.bars):
        from atrex.runner.plot import fractions_png, roofline_png

        reports = {**({"base": result.base} if result.base else {}), "head": result.head}
        if args.plot:
            roofline_png(reports, args.plot)
        if args.bars:
            fractions_png(reports, args.bars)
    if args.outputs:
        ops = ",".join(c.name for c in result.judgement.ops)
        title = " ".join(result.judgement.title.split())
        lines = (f"conclusion={result.judgement.conclusion}\ntitle={title}\nops={ops}\n"
                 f"head-sha={result.head_sha}\nbase-sha={result.base_sha or ''}\n")
        if is_stdout(args.outputs):
            write_text(args.outputs, lines)
        else:
            with open(args.outputs, "a") as handle:  # $GITHUB_OUTPUT is appended to
                handle.write(lines)


# --- pr-comment --------------------------------------------------------------------------------

def cmd_pr_comment(args: argparse.Namespace) -> int:
    from github import GithubException

    from .prcheck import result_from_dict
    from .render import comment_body

    token = os.environ.get("GITHUB_TOKEN")
    number = args.pr or _event_pr_number()
    if not token or not args.repo or number is None:
        return _error("pr-comment", "needs $GITHUB_TOKEN, --repo (or $GITHUB_REPOSITORY) and "
                      "--pr (or a pull_request event in $GITHUB_EVENT_PATH)")
    try:
        result = result_from_dict(json.loads(args.result.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        return _error("pr-comment", f"{args.result}: not a pr-report result ({exc})")
    api = _repo_api(token, args.api_url, args.repo, args.author)
    try:
        if args.expect_head_sha and (problem := _head_mismatch(api, number, result,
                                                                args.expect_head_sha)):
            return _error("pr-comment", problem)
        comment_id = upsert_sticky(api, number,
                                   comment_body(result, full_report=artifact_location()),
                                   create=result.worth_a_comment)
    except GithubException as exc:
        if exc.status == 403:  # a read-only token (a fork's pull_request run): not an error
            print(f"::warning::atrex pr-comment: the token may not comment ({exc.status}); "
                  "for fork pull requests post from a workflow_run job (docs/deploy.md)")
            return EXIT_OK
        raise
    print(f"atrex pr-comment: {'comment ' + str(comment_id) if comment_id else 'no comment'}")
    return EXIT_OK


def artifact_location() -> str:
    """Where a reader finds the whole report: the report artifact of the workflow run that made
    it (for a `workflow_run` job, the triggering run), else the JSON file."""
    name = "`atrex-report.json` (the action's report artifact, `atrex-report` by default)"
    event = _event()
    run = (event.get("workflow_run") or {}).get("html_url")
    if not run and all(os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY",
                                                     "GITHUB_RUN_ID")):
        run = (f"{os.environ['GITHUB_SERVER_URL']}/{os.environ['GITHUB_REPOSITORY']}"
               f"/actions/runs/{os.environ['GITHUB_RUN_ID']}")
    return f"{name} of [the workflow run]({run})" if run else \
        "the JSON report (`atrex pr-report --json`)"


def _event() -> dict:
    path = os.environ.get("GITHUB_EVENT_PATH")
    if not path or not Path(path).is_file():
        return {}
    try:
        event = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return event if isinstance(event, dict) else {}


def _event_pr_number() -> int | None:
    number = (_event().get("pull_request") or {}).get("number")
    return number if isinstance(number, int) else None


def _repo_api(token: str, api_url: str, repo: str, author: str):
    from github import Auth, Github

    from .config import BotConfig
    from .github import RepoApi, make_retry

    gh = Github(auth=Auth.Token(token), base_url=api_url.rstrip("/"),
                retry=make_retry(BotConfig()), lazy=True)
    return RepoApi(gh, repo, lambda: author)


def _head_mismatch(api, number: int, result, expected: str) -> str | None:
    head = api.pull(number).head_sha
    if head != expected or result.head_sha != expected:
        return (f"pull request #{number} is at {head[:12]}, the result is for "
                f"{result.head_sha[:12]}, expected {expected[:12]}: not posting")
    return None


def upsert_sticky(api, number: int, body: str, create: bool = True) -> int | None:
    """Edit the pull request's sticky comment (the App's marker) or create it; like
    `atrex.bot.effects.upsert_sticky` without the job store."""
    from .render import STICKY_MARKER

    found = api.find_comment(number, STICKY_MARKER)
    if found is not None and api.edit_comment(number, found, body):
        return found
    return api.create_comment(number, body, STICKY_MARKER) if create else None
