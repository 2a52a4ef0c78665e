import pytest
from atrex.bot.commands import Command, parse


@pytest.mark.parametrize("body,expected", [
    ("/atrex optimize", Command("optimize", [])),
    ("/atrex optimize rmsnorm gemm_fp8\nplease", Command("optimize", ["rmsnorm", "gemm_fp8"])),
    ("  /ATREX Rerun  \r\nthanks", Command("rerun", [])),
    ("/atrex approve 0123abcDEF", Command("approve", ["0123abcDEF"])),
    ("/atrex help", Command("help", [])),
    ("/atrex", Command("help", [])),
])
def test_commands_parse(body, expected):
    assert parse(body) == expected


@pytest.mark.parametrize("body", [
    "please /atrex rerun", "hello\n/atrex rerun", "/atrexrerun", "", None, "   \n  ",
    "> /atrex rerun",
])
def test_not_a_command(body):
    assert parse(body) is None


@pytest.mark.parametrize("body,error", [
    ("/atrex frobnicate", "unknown command"),
    ("/atrex rerun now", "takes no arguments"),
    ("/atrex approve", "exactly one commit SHA"),
    ("/atrex approve abc", "not a commit SHA"),
    ("/atrex approve 0123456 789abcd", "exactly one commit SHA"),
    ("/atrex optimize rm;sh", "not an operator name"),
    ("/atrex help me", "takes no arguments"),
])
def test_malformed_commands_carry_an_error(body, error):
    command = parse(body)
    assert command is not None and command.error is not None and error in command.error


def test_help_does_not_claim_help_needs_write_permission():
    from atrex.bot.commands import HELP

    lines = HELP.splitlines()
    assert "permission" not in lines[0]  # the heading applies to every command
    [help_row] = [line for line in lines if line.startswith("| `/atrex help`")]
    assert "| anyone |" in help_row
    for name in ("optimize", "rerun", "approve"):
        [row] = [line for line in lines if line.startswith(f"| `/atrex {name}")]
        assert "write permission or higher" in row
