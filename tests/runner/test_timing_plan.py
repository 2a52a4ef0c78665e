"""How many calls one CUDA-graph replay holds for a launch-bound shape (pure arithmetic)."""

from __future__ import annotations

from runner.worker.timing import GRAPH_CALLS, GRAPH_COPIES_MAX_BYTES, graph_calls


def test_small_inputs_get_the_full_graph():
    assert graph_calls(512 << 10, contestants=3) == GRAPH_CALLS


def test_copies_stay_inside_the_memory_budget():
    per_input = 100 << 20
    calls = graph_calls(per_input, contestants=3)
    assert 1 < calls < GRAPH_CALLS
    assert calls * per_input * 3 <= GRAPH_COPIES_MAX_BYTES


def test_inputs_too_large_for_copies_get_a_single_call():
    assert graph_calls(GRAPH_COPIES_MAX_BYTES, contestants=2) == 1
    assert graph_calls(0, contestants=0) == GRAPH_CALLS
