"""How many calls one CUDA-graph replay holds for a launch-bound shape (pure arithmetic)."""

from __future__ import annotations

from runner.judge.timing import GRAPH_CALLS, GRAPH_COPIES_MAX_BYTES, graph_calls

H200_FREE = 140 << 30
L40S_FREE = 44 << 30


def test_small_inputs_get_the_full_graph():
    assert graph_calls(512 << 10, contestants=3, free_bytes=H200_FREE) == GRAPH_CALLS


def test_a_large_page_pool_still_gets_many_calls_on_an_h200():
    pool = 256 << 20  # the suite's decode KV-cache append carries a 256 MiB pool
    calls = graph_calls(pool, contestants=3, free_bytes=H200_FREE)
    assert calls >= 16 and calls * pool * 3 <= GRAPH_COPIES_MAX_BYTES


def test_copies_stay_inside_a_quarter_of_free_memory():
    per_input = 300 << 20
    calls = graph_calls(per_input, contestants=3, free_bytes=L40S_FREE)
    assert 1 < calls < GRAPH_CALLS
    assert calls * per_input * 3 <= L40S_FREE // 4


def test_inputs_too_large_for_copies_get_a_single_call():
    assert graph_calls(GRAPH_COPIES_MAX_BYTES, contestants=2, free_bytes=H200_FREE) == 1
    assert graph_calls(1 << 20, contestants=1, free_bytes=0) == 1
