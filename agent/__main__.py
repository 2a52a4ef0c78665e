"""``python -m atrex.agent optimize ...``: the agent's command without the atrex composition
root (the same ``register`` that ``atrex/cli.py`` calls). Used by benchmarks/agent_h200.sh."""

import argparse
import sys

from .cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atrex.agent")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
