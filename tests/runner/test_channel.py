"""The judge's sealed result channel (runner/channel.py): what the evaluator takes and refuses."""

from __future__ import annotations

import json

import pytest
from atrex.runner.channel import Opener, Sealer, Tampered, new_key


def sealed(key: str, *kinds: str) -> list[bytes]:
    sealer = Sealer(key)
    return [sealer.seal(kind, {"shape": "s", "label": "c"}) for kind in kinds]


def test_the_judges_lines_open_in_order():
    key = new_key()
    opener = Opener(key)
    messages = [opener.open(line) for line in sealed(key, "begin", "checked", "done")]
    assert [m["type"] for m in messages] == ["begin", "checked", "done"]
    assert [m["seq"] for m in messages] == [0, 1, 2]


def test_a_line_without_the_seal_is_refused():
    key = new_key()
    opener = Opener(key)
    forged = json.dumps({"type": "checked", "seq": 0, "verdict": {"status": "pass"}}).encode()
    with pytest.raises(Tampered, match="seal"):
        opener.open(forged)


def test_an_edited_line_keeps_no_seal():
    key = new_key()
    line = sealed(key, "checked")[0]
    edited = line.replace(b'"label": "c"', b'"label": "d"')
    with pytest.raises(Tampered, match="seal"):
        Opener(key).open(edited)


def test_another_judges_key_does_not_open():
    with pytest.raises(Tampered, match="seal"):
        Opener(new_key()).open(sealed(new_key(), "done")[0])


def test_a_cut_or_replayed_line_is_out_of_order():
    key = new_key()
    first, second, third = sealed(key, "begin", "checked", "done")
    cut = Opener(key)
    cut.open(first)
    with pytest.raises(Tampered, match="2 arrived where 1 was due"):
        cut.open(third)
    replayed = Opener(key)
    replayed.open(first)
    replayed.open(second)
    with pytest.raises(Tampered, match="1 arrived where 2 was due"):
        replayed.open(second)
