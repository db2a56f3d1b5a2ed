"""The training loop on tiny models: schedule, determinism, clipping, z-loss, attention maxima,
divergence, evaluation, and bad configs. Fast: a few dozen steps of a 2-layer, 32-wide model."""

import copy
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from gpt2ln import GPT2, GPT2Config, TrainConfig, evaluate_loss, get_batch, load_tokens, lr_at, train

TINY = GPT2Config(vocab_size=256, n_ctx=32, n_embd=32, n_layer=2, n_head=2)
CFG = TrainConfig(
    steps=30,
    batch_size=8,
    block_size=32,
    lr=3e-3,
    warmup_steps=5,
    eval_interval=15,
    eval_batches=2,
    device="cpu",
)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models train several times faster on one thread than on two busy cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def data():
    return load_tokens("train"), load_tokens("val")


def tiny_model(seed=0, **changes):
    torch.manual_seed(seed)
    return GPT2(TINY.replace(**changes))


def first_batch(train_data, cfg):
    """The batch ``train`` draws at step 0."""
    return get_batch(train_data, cfg.batch_size, cfg.block_size, torch.Generator().manual_seed(cfg.seed))


# --------------------------------------------------------------- lr schedule
def test_lr_schedule():
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1e-3, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == 0.0
    assert lr_at(5, cfg) == pytest.approx(5e-4)
    assert lr_at(10, cfg) == pytest.approx(1e-3)  # peak at the end of warm-up
    assert lr_at(55, cfg) == pytest.approx((1e-3 + 1e-4) / 2)  # cosine half-way
    assert lr_at(100, cfg) == pytest.approx(1e-4) == lr_at(500, cfg)  # min_lr at steps and after
    lrs = [lr_at(s, cfg) for s in range(101)]
    assert all(a < b for a, b in itertools.pairwise(lrs[:11]))  # linear rise
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))  # then decay
    assert max(lrs) == lrs[10]
    no_warmup = cfg.replace(warmup_steps=0)
    assert lr_at(0, no_warmup) == 1e-3 and lr_at(100, no_warmup) == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="step"):
        lr_at(-1, cfg)


# ------------------------------------------------------------------ training
def test_loss_decreases_on_shakespeare(data):
    h = train(tiny_model(), *data, CFG, progress=False)
    assert not h.diverged and h.step == list(range(30))
    assert h.loss[0] == pytest.approx(math.log(256), abs=0.05)  # uniform over bytes at init
    assert sum(h.loss[-5:]) / 5 < h.loss[0] - 1.0
    assert h.val_step == [0, 15, 30] and h.val_loss[-1] < h.val_loss[0] - 1.0
    assert h.lr == [lr_at(s, CFG) for s in range(30)]
    assert h.ce == h.loss  # no z-loss


def test_same_seed_same_history(data, capsys):
    a = train(tiny_model(), *data, CFG.replace(steps=10, eval_interval=5), progress=False)
    b = train(tiny_model(), *data, CFG.replace(steps=10, eval_interval=5), progress=False)
    assert a == b and len(a.val_loss) == 3
    c = train(tiny_model(), *data, CFG.replace(steps=10, eval_interval=5, seed=1), progress=False)
    assert c.loss != a.loss
    assert capsys.readouterr() == ("", "")  # progress=False prints nothing


def test_grad_clipping(data):
    model = tiny_model()
    h = train(model, data[0], None, CFG.replace(steps=1, warmup_steps=0, grad_clip=1e-2), progress=False)
    clipped = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert h.grad_norm[0] > 1.0  # recorded before clipping
    assert clipped.item() == pytest.approx(1e-2, rel=1e-3)  # the gradient used was clipped

    model = tiny_model()
    h = train(model, data[0], None, CFG.replace(steps=1, warmup_steps=0, grad_clip=None), progress=False)
    unclipped = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert unclipped.item() == pytest.approx(h.grad_norm[0], rel=1e-5)


def test_z_loss_adds_its_term(data):
    cfg = CFG.replace(steps=1, warmup_steps=0, z_loss=1e-2)
    model = tiny_model()
    x, _ = first_batch(data[0], cfg)
    with torch.no_grad():
        log_z = torch.logsumexp(model(x), dim=-1)  # [B, T]
    expected = 1e-2 * log_z.square().mean().item()
    plain = train(tiny_model(), data[0], None, cfg.replace(z_loss=0.0), progress=False)
    with_z = train(model, data[0], None, cfg, progress=False)
    assert with_z.ce[0] == pytest.approx(plain.loss[0], rel=1e-6)
    assert with_z.loss[0] - with_z.ce[0] == pytest.approx(expected, rel=1e-4)


def test_attention_max_matches_run_with_cache(data):
    model = tiny_model()
    reference = copy.deepcopy(model)
    h = train(model, data[0], None, CFG.replace(steps=2, warmup_steps=0), progress=False)
    _, cache = reference.run_with_cache(first_batch(data[0], CFG)[0])
    expected = []
    for layer in range(TINY.n_layer):
        scores = cache[f"attn_scores.{layer}"]
        expected.append(scores[torch.isfinite(scores)].abs().max().item())
    assert len(h.attn_max) == 2 and all(len(row) == TINY.n_layer for row in h.attn_max)
    assert h.attn_max[0] == pytest.approx(expected, rel=1e-6)
    assert all(not b.attn.attend._forward_pre_hooks for b in model.h)  # the hooks are gone

    off = train(
        tiny_model(), data[0], None, CFG.replace(steps=2, warmup_steps=0, log_attn_max=False), progress=False
    )
    assert off.attn_max == [] and off.loss == h.loss


def test_attention_max_with_qk_norm(data):
    h = train(tiny_model(qk_norm=True), data[0], None, CFG.replace(steps=2, warmup_steps=0), progress=False)
    assert all(0 < v < math.inf for v in h.attn_max[0])


def test_divergence_is_recorded_not_raised(data):
    model = tiny_model()
    h = train(model, *data, CFG.replace(steps=20, lr=1e3), progress=False)
    assert h.diverged and h.diverged_step is not None and h.diverged_step < 19
    assert h.step[-1] == h.diverged_step and len(h.loss) == h.diverged_step + 1
    assert not (math.isfinite(h.loss[-1]) and math.isfinite(h.grad_norm[-1]))
    assert h.val_step == [0, 15][: len(h.val_step)] and 30 not in h.val_step  # no final eval
    assert model.training  # mode restored


# ---------------------------------------------------------------- evaluation
def test_evaluate_loss_on_random_batches(data):
    model = tiny_model()
    model.train()
    a = evaluate_loss(model, data[1], block_size=17, batch_size=4, batches=3)
    b = evaluate_loss(model, data[1], 17, 4, 3, torch.Generator().manual_seed(0))
    assert a == b and a == pytest.approx(math.log(256), abs=0.05)
    assert model.training  # mode restored
    gen = torch.Generator().manual_seed(0)  # the batches are get_batch's, windows of block_size tokens
    batches = [get_batch(data[1], 4, 16, gen) for _ in range(3)]
    with torch.no_grad():
        ref = [F.cross_entropy(model.eval()(x).flatten(0, 1), y.flatten()) for x, y in batches]
    assert a == pytest.approx(torch.stack(ref).mean().item(), rel=1e-6)
    model.eval()
    evaluate_loss(model, data[1], 17, 4, 1)
    assert not model.training
    with pytest.raises(ValueError, match="batches"):
        evaluate_loss(model, data[1], 17, 4, 0)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "changes, field",
    [
        ({"steps": 0}, "steps"),
        ({"batch_size": 2.0}, "batch_size"),
        ({"block_size": True}, "block_size"),
        ({"lr": 0.0}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"warmup_steps": 2000}, "warmup_steps"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"betas": (0.9,)}, "betas"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"grad_clip": 0}, "grad_clip"),
        ({"z_loss": -1e-4}, "z_loss"),
        ({"eval_interval": 0}, "eval_interval"),
        ({"eval_batches": -1}, "eval_batches"),
        ({"seed": "0"}, "seed"),
        ({"log_attn_max": 1}, "log_attn_max"),
        ({"device": 0}, "device"),
    ],
)
def test_bad_config(changes, field):
    with pytest.raises(ValueError, match=f"expected {field} to be .*, got"):
        TrainConfig(**changes)


def test_bad_train_input(data):
    model = tiny_model()
    with pytest.raises(ValueError, match="block_size 64 exceeds the model's n_ctx 32"):
        train(model, data[0], None, CFG.replace(block_size=64), progress=False)
    with pytest.raises(ValueError, match="train_data"):
        train(model, data[0].float(), None, CFG, progress=False)
    with pytest.raises(ValueError, match="val_data has 10 tokens"):
        train(model, data[0], data[1][:10], CFG, progress=False)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 100\)"):
        train(tiny_model(vocab_size=100), data[0], None, CFG, progress=False)
    with pytest.raises(TypeError, match="TrainConfig"):
        train(model, data[0], None, {"steps": 1}, progress=False)
    with pytest.raises(TypeError, match="GPT2"):
        train(torch.nn.Linear(2, 2), data[0], None, CFG, progress=False)


def test_lr_sensitivity_passes_the_chapter_8_check_and_names_bad_input():
    from gpt2ln.exercises import check_lr_sensitivity
    from gpt2ln.lab.train import lr_sensitivity

    check_lr_sensitivity(lambda lrs, losses, loss_init: lr_sensitivity(losses, loss_init))
    assert lr_sensitivity([2.0, 1.0, float("nan"), 9.0], 5.0) == pytest.approx((1 + 0 + 4 + 4) / 4)
    with pytest.raises(ValueError, match="empty sweep"):
        lr_sensitivity([], 5.0)
    with pytest.raises(ValueError, match="finite loss_init, got nan"):
        lr_sensitivity([1.0], float("nan"))
