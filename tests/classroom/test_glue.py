"""``glue`` returns the formatted text; ``span`` never prints a range whose two ends are the same."""

from gpt2ln.classroom import glue, span


def test_glue_returns_the_formatted_value_outside_a_kernel():
    assert glue("x", 0.123456, ".2f") == "0.12"


def test_span_collapses_a_range_whose_ends_print_the_same():
    assert span(0.1401, 0.1398, ".2f") == "0.14"
    assert span(3, 3) == "3"


def test_span_keeps_a_range_whose_ends_differ():
    assert span(0.17, 0.24, ".2f") == "0.17 to 0.24"
    assert span(1, 2, "d", sep="–") == "1–2"
