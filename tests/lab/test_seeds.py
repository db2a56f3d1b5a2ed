"""gpt2ln.lab.seeds: the chapter's seeds from GPT2LN_SEED, jobs on worker processes, train_job, spread."""

import math
import os
import signal

import pytest
import torch

import gpt2ln
from gpt2ln import GPT2, GPT2Config, TrainConfig
from gpt2ln.lab.seeds import (
    SEED_ENV,
    TrainJob,
    base_seed,
    chapter_seeds,
    close_pool,
    run_jobs,
    spread,
    train_job,
)

CFG = GPT2Config(vocab_size=256, n_ctx=16, n_embd=32, n_layer=2, n_head=2)
TCFG = TrainConfig(steps=4, batch_size=2, block_size=16, warmup_steps=1, eval_interval=4, eval_batches=1)


def test_base_seed_defaults_to_0_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv(SEED_ENV, raising=False)
    assert base_seed() == 0 and chapter_seeds() == [0, 1, 2]
    monkeypatch.setenv(SEED_ENV, " 2 ")
    assert base_seed() == 2 and chapter_seeds() == [2, 3, 4] and chapter_seeds(1) == [2]


@pytest.mark.parametrize("bad", ["x", "1.5", "-1"])
def test_base_seed_names_a_bad_value(monkeypatch, bad):
    monkeypatch.setenv(SEED_ENV, bad)
    with pytest.raises(ValueError, match=f"{SEED_ENV}: expected a non-negative integer"):
        base_seed()


def test_chapter_seeds_rejects_a_bad_count():
    with pytest.raises(ValueError, match="expected n to be a positive integer, got 0"):
        chapter_seeds(0)


def test_run_jobs_keeps_the_order_in_process_and_on_workers():
    jobs = [5, 0, 3, 7, 1]
    expected = [math.factorial(j) for j in jobs]
    assert run_jobs(math.factorial, jobs, workers=1) == expected
    try:
        assert run_jobs(math.factorial, jobs, workers=2) == expected
    finally:
        close_pool()


def test_run_jobs_runs_gpu_training_jobs_in_this_process_by_default(monkeypatch):
    """workers=None: jobs that train on a GPU (alone or in a tuple) run here, one after another; the
    others on one worker per core."""
    from gpt2ln.lab import seeds

    seen = []
    monkeypatch.setattr(seeds, "default_workers", lambda: 2)

    def no_pool(workers):
        seen.append(workers)
        raise RuntimeError("pool")

    monkeypatch.setattr(seeds, "_get_pool", no_pool)
    gpu = TrainJob(CFG, TCFG.replace(device="cuda"))
    assert seeds._on_accelerator(gpu) and seeds._on_accelerator((gpu, "xavier"))
    assert not seeds._on_accelerator(TrainJob(CFG, TCFG.replace(device="cpu")))
    assert not seeds._on_accelerator(3)
    assert run_jobs(repr, [(gpu, 1), (gpu, 2)]) == [repr((gpu, 1)), repr((gpu, 2))]  # in process
    with pytest.raises(RuntimeError, match="pool"):  # CPU jobs: a pool of default_workers()
        run_jobs(math.factorial, [1, 2])
    assert seen == [2]


def test_run_jobs_rejects_a_function_workers_cannot_import():
    def local(x):
        return x

    local.__module__ = "__main__"
    with pytest.raises(TypeError, match="importable from a module"):
        run_jobs(local, [1, 2], workers=2)
    with pytest.raises(ValueError, match="expected workers to be a positive integer or None, got 0"):
        run_jobs(math.factorial, [1], workers=0)


def test_a_dead_worker_is_named_and_the_next_call_gets_a_new_pool():
    # A worker killed mid-job (as the OOM killer would): the error names its signal, and the
    # broken pool is not reused.
    try:
        with pytest.raises(RuntimeError, match=r"worker pool broke.*SIGKILL"):
            run_jobs(signal.raise_signal, [signal.SIGKILL, signal.SIGKILL], workers=2)
        assert run_jobs(math.factorial, [3, 4], workers=2) == [6, 24]
    finally:
        close_pool()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files in /proc (Linux)")
def test_results_with_tensors_hold_no_file_descriptors_here():
    # Tensors come back as bytes (torch.save in the worker), not as one shared-memory file each.
    try:
        before = _open_fds()
        results = run_jobs(train_job, [TrainJob(CFG, TCFG.replace(seed=s)) for s in range(4)], workers=2)
        n_tensors = sum(len(r.state) for r in results)
        assert n_tensors > 40 and _open_fds() - before < 20, (n_tensors, before, _open_fds())
    finally:
        close_pool()


def test_train_job_matches_gpt2ln_train_and_a_worker_gives_the_same_run():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers run one thread: the same rounding here
    try:
        _compare_with_train_and_worker()
    finally:
        torch.set_num_threads(threads)
        close_pool()


def _compare_with_train_and_worker():
    job = TrainJob(CFG, TCFG.replace(seed=3), init_seed=5)
    torch.manual_seed(5)
    model = GPT2(CFG)
    reference = gpt2ln.train(
        model, gpt2ln.load_tokens("train"), gpt2ln.load_tokens("val"), job.cfg, progress=False
    )
    here = train_job(job)
    assert here.history.loss == reference.loss and here.history.val_loss == reference.val_loss
    rebuilt = here.model()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in rebuilt.state_dict().items())
    there = run_jobs(train_job, [job, TrainJob(CFG, TCFG.replace(seed=4), init_seed=5)], workers=2)
    assert there[0].history.loss == here.history.loss
    assert there[1].history.loss != here.history.loss  # another batch order


def test_train_job_hook_and_bad_jobs():
    result = train_job(TrainJob(CFG.replace(norm="dyt"), TCFG, hook="ln_f_layernorm"))
    assert isinstance(result.model().ln_f, gpt2ln.LayerNorm) and isinstance(
        result.model().h[0].ln_1, gpt2ln.DyT
    )
    with pytest.raises(ValueError, match="expected hook in"):
        TrainJob(CFG, TCFG, hook="nope")
    with pytest.raises(TypeError, match="expected cfg to be a TrainConfig, got dict"):
        TrainJob(CFG, {})


def test_spread_ignores_nan_and_formats_median_and_range():
    s = spread([3.0, math.nan, 1.0, 2.0])
    assert (s.median, s.lo, s.hi, s.width) == (2.0, 1.0, 3.0, 2.0)
    assert format(s, ".1f") == "2.0 (1.0 to 3.0)"
    assert format(spread([1.21, 1.24, 1.18]), ".2g") == "1.2 (all seeds)"  # no range whose ends are equal
    assert math.isnan(spread([math.nan]).median)
    with pytest.raises(ValueError, match="at least one value"):
        spread([])
