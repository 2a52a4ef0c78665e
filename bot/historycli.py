"""`atrex history REPO`: a repository's history in the terminal, or as JSON (the dashboard's
series, `atrex.history/1`), read from the bot's database (ATREX_DATABASE_URL / ATREX_DATA_DIR)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from .config import ConfigError, load_config


def register(subparsers: argparse._SubParsersAction) -> None:
    history = subparsers.add_parser(
        "history", help="a repository's evaluated commits, scores and operator trends",
        description="Print the default branch's evaluated commits of REPO (owner/name) with the "
        "repository score, GPU-hours at stake and each operator's roofline fraction, "
        "regressions marked (▼), from the bot's database; comparable runs only (one GPU kind "
        "and peaks: the newest default-branch evaluation's, or --env).")
    history.add_argument("repo", metavar="REPO", help="owner/name")
    history.add_argument("--config", help="TOML file with a [bot] table (default: $ATREX_CONFIG)")
    history.add_argument("--json", action="store_true", help="print the series as JSON")
    history.add_argument("--env", metavar="KEY", help="environment key (see the first lines)")
    history.add_argument("--last", type=int, metavar="N", help="only the newest N commits")
    history.add_argument("--op", action="append", dest="ops", metavar="NAME",
                         help="only these operators (repeatable)")
    history.add_argument("--link", action="store_true",
                         help="print the dashboard's secret link (made on first use)")
    history.add_argument("--rotate-link", action="store_true",
                         help="replace the secret link (every earlier one stops working)")
    history.set_defaults(func=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    from .app import open_store
    from .dashboard.access import AccessStore
    from .prhistory import history_for
    from .trend import build

    if "/" not in args.repo or args.repo.count("/") != 1 or (args.last is not None
                                                             and args.last < 1):
        print(f"atrex history: REPO must be owner/name and --last at least 1 (got "
              f"{args.repo!r})", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"atrex history: configuration error: {exc}", file=sys.stderr)
        return 2
    store = open_store(config)
    try:
        if args.link or args.rotate_link:
            secret = AccessStore(store).link_secret(args.repo, rotate=args.rotate_link,
                                                    by="atrex history")
            root = config.public_url or ""
            print(f"{root}/dashboard/{args.repo}?key={secret}")
            return 0
        history = history_for(config, store)
        evals = history.evaluations(args.repo)
        envs = history.environments(args.repo)
        if args.env and args.env not in {key for key, _, _ in envs}:
            print(f"atrex history: --env {args.env!r}: no default-branch evaluation of "
                  f"{args.repo} ran there (known: {', '.join(k for k, _, _ in envs) or 'none'})",
                  file=sys.stderr)
            return 2
        h = build(args.repo, evals, envs, env_key=args.env,
                  pulls=[e for e in evals if e.kind == "pr"], last=args.last)
    finally:
        store.close()
    if args.ops:
        h.ops = {name: op for name, op in h.ops.items() if name in args.ops}
    print(json.dumps(h.to_dict(), indent=2) if args.json else "\n".join(render(h)))
    return 0


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _value(value: float | None, regressed: bool, fmt: str = "{:.3f}") -> str:
    text = "n/a" if value is None else fmt.format(value)
    return text + ("▼" if regressed else "")


def render(h) -> list[str]:
    """The terminal form: a table of commits, then one trend line per series."""
    from .trend import sparkline

    if not h.commits:
        return [f"{h.repo}: no default-branch evaluation recorded"]
    others = [f"{key} ({n})" for key, n, _ in h.environments if key != h.env.key]
    lines = [f"{h.repo} · {h.env.label} · {len(h.commits)} default-branch commits "
             f"(environment {h.env.key})"]
    if others:
        lines.append("other environments (not compared): " + ", ".join(others))
    bad = {(m.metric, m.op, m.sha) for m in h.regressions}
    names = list(h.ops)
    header = ["commit ", "PR    ", "evaluated       ", "score   ", "GPU-h at stake",
              *[name[:14] for name in names]]
    widths = [max(len(head), 10) for head in header]
    lines += ["", "  ".join(head.ljust(w) for head, w in zip(header, widths, strict=True))]
    for e in h.commits:
        cells = [e.sha[:7], f"#{e.pr}" if e.pr else "", _when(e.recorded_at),
                 _value(e.score, ("score", None, e.sha) in bad),
                 _value(e.gpu_hours_at_stake, ("gpu_hours_at_stake", None, e.sha) in bad,
                        "{:.4g}")]
        for name in names:
            p = e.op(name)
            if p is None:
                cells.append("—")
            elif p.status != "pass":
                cells.append(p.status + ("▼" if ("fraction", name, e.sha) in bad else ""))
            else:
                cells.append(_value(p.fraction, ("fraction", name, e.sha) in bad))
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    lines += ["", "trend (oldest → newest)"]
    series = [("score", h.score), ("GPU-h at stake", h.stake)] + [
        (f"{name} fraction", h.ops[name].series["fraction"]) for name in names] + [
        (f"{name} own-kernel share", h.ops[name].series["own_kernel_share"]) for name in names]
    for label, s in series:
        known = [v for v in s.values() if v is not None]
        span = f"{known[0]:.4g} → {known[-1]:.4g}" if known else "n/a"
        moved = s.moved_by
        by = f"  moved by {moved.sha[:7]}{f' (#{moved.pr})' if moved.pr else ''}: " \
             f"{moved.describe()}" if moved else ""
        lines.append(f"  {label[:32].ljust(32)} {sparkline(s.values())}  {span}{by}")
    if h.regressions:
        lines += ["", "regressions"]
        for m in h.regressions:
            what = f"{m.op} {m.metric}" if m.op else m.metric
            lines.append(f"  {m.sha[:7]}{f' (#{m.pr})' if m.pr else ''}  {what}: {m.describe()}")
    return lines
