"""Help formatting shared by every `atrex` command."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.HelpFormatter):
    """Wraps a one-paragraph description; keeps text with line breaks (an epilog listing the
    exit codes) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)
