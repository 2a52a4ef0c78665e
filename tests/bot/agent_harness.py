"""Test-only entry point: `python -m tests.bot.agent_harness <command> ...` is `python -m atrex.bot`
whose worker runs the bundled agent with its documented test seam, an injected timer.

On a CPU the runner measures no time, so the agent could never show a gain; the end-to-end tests
start their worker through this module instead of `python -m atrex.bot`. Nothing in the bot reads an
environment variable or a setting for this: the timer reaches the agent only through the
`runtime_factory` this module hands to the worker command. The attempt logs and the PR body say
the timing was injected.

The timer: the naive RMSNorm (`_rmsnorm` kernels) runs at 5% of roofline with `BLOCK_SIZE = 64`
and proportionally faster with bigger blocks; every other kernel times the same whatever its
settings, so the agent finds no significant gain there.
"""

from __future__ import annotations

import argparse
import re
import sys

from atrex.bot.cli import register

BASE_FRACTION = 0.05
_BLOCK = re.compile(r"^BLOCK_SIZE = (\d+)$", re.M)


def block_size_timer(source: str, shape) -> float:
    """Deterministic milliseconds for a candidate module on a shape (see the module docstring)."""
    base = shape.sol_ms / BASE_FRACTION
    match = _BLOCK.search(source)
    if "_rmsnorm" not in source or match is None:
        return base
    return base * 64 / int(match.group(1))


def runtime_factory(config):
    from atrex.bot.worker import build_runtime, bundled_agent

    return build_runtime(config, agent=bundled_agent(config, timer=block_size_timer))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bot.agent_harness")
    register(parser.add_subparsers(dest="command", required=True))
    parser.set_defaults(runtime_factory=runtime_factory)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
