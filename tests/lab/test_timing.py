"""gpt2ln.lab.timing: the timing tools of chapter 4 and the benchmark."""

import pytest
import torch

import gpt2ln
from gpt2ln.lab.timing import copy_bandwidth, time_fn, time_interleaved


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="callable"):
        time_fn(3)
    with pytest.raises(ValueError, match="repeats"):
        time_fn(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="nbytes"):
        copy_bandwidth(nbytes=0)
    with pytest.raises(TypeError, match="dict"):
        time_interleaved({})


def test_timing_helpers_return_positive_numbers():
    assert time_fn(torch.zeros, 10, repeats=3, warmup=1) > 0
    gbps = copy_bandwidth(nbytes=2**20, repeats=3)
    assert 0 < gbps < 1e5
    t = time_interleaved({"a": lambda: torch.zeros(10), "b": lambda: torch.ones(10)}, repeats=3)
    assert set(t) == {"a", "b"} and all(v > 0 for v in t.values())


def test_the_package_exports_them():
    assert gpt2ln.time_fn is time_fn and gpt2ln.copy_bandwidth is copy_bandwidth
