"""`atrex <command>`: each package contributes its commands through `<package>.cli.register`.

The runner never imports the agent or the bot; this module, above all three, is the only place
that knows them all. A package whose optional dependencies are not installed still lists its
commands; running one says what to install.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = ("runner.cli", "runner.weights", "runner.importers.cli", "agent.cli",
                   "bot.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atrex", description="GPU-kernel CI: correctness, own-kernel share, roofline "
        "fraction and GPU-hour scores.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):  # package not part of this installation
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
