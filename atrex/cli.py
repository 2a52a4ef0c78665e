"""`atrex <command>`: each package contributes its commands through `<package>.cli.register`.

The runner never imports the agent or the bot; this module, above all three, is the only place
that knows them all. A package whose optional dependencies are not installed still lists its
commands; running one says what to install.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from atrex.runner import __version__
from atrex.runner.clihelp import HelpFormatter

COMMAND_MODULES = ("atrex.runner.cli", "atrex.runner.weights", "atrex.runner.importers.cli",
                   "atrex.agent.cli", "atrex.bot.cli")

EPILOG = """\
exit status (every command):
  0  success (check: every operator passes)
  1  the command ran and found a failure (check: an operator is not `pass`)
  2  usage error, or a malformed repository or input (what and where on stderr)

`atrex COMMAND --help` gives each command's options and defaults."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atrex", description="GPU-kernel CI: correctness, own-kernel share, roofline "
        "fraction and GPU-hour scores.", epilog=EPILOG,
        formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"atrex {__version__}",
                        help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `atrex`: the help, not an error
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
