"""The record behind chapter 11: longer runs than the chapter's live run, for three seeds.

    PYTHONPATH=. python scripts/record_ch11.py            # writes gpt2ln/assets/records/ch11_variants.json
    PYTHONPATH=. python scripts/record_ch11.py --workers 1
    PYTHONPATH=. python scripts/record_ch11.py --only sqrt_d_control   # one experiment, merged

The chapter's live run (150 steps, learning rates 3e-3 to 3e-2; 1e-3 too when this record was
made) leaves post LN, DeepNorm and DyT on the byte-frequency plateau. This record asks whether
they leave it with a lower learning rate (3e-4) and a run four times as long (for post LN and
DeepNorm also as long at the live rate 3e-3, to tell which of the two frees them, with pre LN
beside them as the control), and tests the
chapter's hypothesis for Peri-LN and OLMo 2: that their output norms swamp the small embeddings,
so multiplying the embeddings by sqrt(d) (Gemma's recipe) should help; pre LN with and without
sqrt(d) at the same setting is the control. For every run it keeps the validation-loss curve and
the "constant-stream" diagnosis: the RMS of the part of the final normalized stream that is the
same at every position, and of the part that depends on the token.

The first 30 runs took 4 to 20 minutes on 2 CPU cores, depending on load; the 6 runs of
longer_live_rate, merged later with --only, 4 minutes on 2 cores under a load of about 5 (its 9
runs, pre LN added, were remade together later with --only).
``--only NAME`` (repeatable) reruns only the experiments named and merges their runs into the
record already on disk, keeping the others' runs; it refuses to merge unless the record's
model, training settings, seeds and the other experiments' settings are the script's. Each run
is deterministic on a given machine and float path (one thread, seeded weights and batches), so
the merged record is the one the whole script writes; only the "seconds" fields, wall-clock
times, differ from run to run.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from gpt2ln import GPT2, GPT2Config, TrainConfig, get_batch, load_tokens, train
from gpt2ln.lab.records import record_path, save_record

MODEL = dict(vocab_size=256, n_ctx=32, n_embd=64, n_layer=4, n_head=4)  # the live run's model
TRAIN = dict(
    batch_size=8, block_size=32, eval_interval=100, eval_batches=8, z_loss=1e-4
)  # warm-up: steps // 5
SEEDS = [0, 1, 2]
# The experiments: (variants, learning rate, steps). The live run's stuck variants (and pre LN, the
# reference) four times as long at a rate three times below the live run's lowest when this was
# made (1e-3; the live run now starts at 3e-3); post LN and
# DeepNorm as long at the live rate 3e-3, which tells the rate from the length (pre LN beside
# them, the control at equal rate and length); Peri-LN and
# OLMo 2 with and without sqrt(d) embeddings, twice as long as the live run, at its rate 3e-3, and
# pre LN (no output norm) with and without them at the same setting.
EXPERIMENTS = {
    "longer": (["post LN", "DeepNorm", "DyT", "pre LN"], 3e-4, 600),
    "longer_live_rate": (["post LN", "DeepNorm", "pre LN"], 3e-3, 600),  # the same length at a live rate
    "sqrt_d": (["Peri-LN", "Peri-LN, sqrt(d) embeddings", "OLMo 2", "OLMo 2, sqrt(d) embeddings"], 3e-3, 300),
    "sqrt_d_control": (["pre LN", "pre LN, sqrt(d) embeddings"], 3e-3, 300),  # the control: no output norm
}
# name -> (GPT2Config changes, what is changed after the model is built)
VARIANTS = {
    "pre LN": ({}, None),
    "pre LN, sqrt(d) embeddings": ({}, "sqrt_d"),
    "post LN": ({"norm_position": "post"}, None),
    "DeepNorm": ({"norm_position": "deepnorm"}, None),
    "DyT": ({"norm": "dyt"}, None),
    "Peri-LN": ({"norm_position": "peri"}, None),
    "Peri-LN, sqrt(d) embeddings": ({"norm_position": "peri"}, "sqrt_d"),
    "OLMo 2": ({"norm_position": "olmo2"}, None),
    "OLMo 2, sqrt(d) embeddings": ({"norm_position": "olmo2"}, "sqrt_d"),
}


def scale_embeddings(model: GPT2) -> GPT2:
    """Multiply the blocks' input (token plus position embedding) by sqrt(d), as Gemma does; the
    tied unembedding is unchanged."""
    factor = model.config.n_embd**0.5
    model.drop.register_forward_hook(lambda module, args, out: out * factor)
    return model


def build(name: str, seed: int) -> GPT2:
    changes, change = VARIANTS[name]
    config = GPT2Config(**MODEL).replace(**changes)
    torch.manual_seed(seed)
    model = GPT2(config)
    if change == "sqrt_d":
        scale_embeddings(model)
    return model


def constant_and_token_rms(h: torch.Tensor) -> tuple[float, float]:
    """h [B, T, d] -> RMS of its mean over all positions (the constant part) and of the rest."""
    flat = h.double().reshape(-1, h.shape[-1])
    constant = flat.mean(0)
    return constant.pow(2).mean().sqrt().item(), (flat - constant).pow(2).mean().sqrt().item()


def one_run(job: tuple[str, str, float, int, int]) -> dict:
    torch.set_num_threads(1)
    experiment, name, lr, seed, steps = job
    data = {split: load_tokens(split) for split in ("train", "val")}
    model = build(name, seed)
    cfg = TrainConfig(**TRAIN, steps=steps, warmup_steps=steps // 5, lr=lr, seed=seed, device="cpu")
    start = time.perf_counter()
    hist = train(model, data["train"], data["val"], cfg, progress=False)
    x_val, _ = get_batch(data["val"], 8, MODEL["n_ctx"], torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        _, cache = model.run_with_cache(x_val)
    const_in, token_in = constant_and_token_rms(cache[f"resid_pre.{MODEL['n_layer']}"])
    const_out, token_out = constant_and_token_rms(cache["ln_f.out"])
    scores = [v for step in hist.attn_max for v in step if math.isfinite(v)]
    return {
        "experiment": experiment,
        "variant": name,
        "lr": lr,
        "seed": seed,
        "steps": steps,
        "diverged": bool(hist.diverged),
        "val_step": [int(s) for s in hist.val_step],
        "val_loss": [float(v) for v in hist.val_loss],
        "final": math.nan if hist.diverged else float(hist.val_loss[-1]),
        "stream_in": [const_in, token_in],  # the input of ln_f (for post-norm: the last block's output)
        "stream_out": [const_out, token_out],  # what the unembedding reads
        "attn_max": max(scores) if scores else math.nan,
        "seconds": time.perf_counter() - start,
    }


def unigram(seed: int) -> float:
    """The byte-frequency loss on the validation batches train() scores for this seed."""
    train_data, val_data = load_tokens("train"), load_tokens("val")
    p = torch.bincount(train_data.long(), minlength=256).double()
    log_p = (p / p.sum()).clamp_min(1e-12).log()
    gen = torch.Generator().manual_seed(seed + 1)  # the generator train() evaluates with
    targets = [
        get_batch(val_data, TRAIN["batch_size"], TRAIN["block_size"], gen)[1]
        for _ in range(TRAIN["eval_batches"])
    ]
    return -torch.stack([log_p[y.long()].mean() for y in targets]).mean().item()


def settings() -> dict:
    return {
        "model": MODEL,
        "train": TRAIN,
        "experiments": {k: {"variants": v, "lr": lr, "steps": n} for k, (v, lr, n) in EXPERIMENTS.items()},
        "seeds": SEEDS,
        "torch": torch.__version__,
    }


def kept_runs(only: list[str]) -> list[dict]:
    """The runs of the record on disk that --only does not rerun, after checking that the record
    was made with the script's settings (so that merging gives what the whole script writes)."""
    old = json.loads(record_path("ch11_variants").read_text(encoding="utf-8"))
    now = settings()
    for key in ("model", "train", "seeds"):
        if old["settings"][key] != now[key]:
            raise SystemExit(f"--only: the record's {key} {old['settings'][key]} is not the script's")
    recorded = old["settings"]["experiments"]
    for name, exp in recorded.items():
        if name not in only and exp != now["experiments"].get(name):
            raise SystemExit(f"--only: the record's experiment {name!r} is not the script's; rerun all")
    missing = [name for name in EXPERIMENTS if name not in only and name not in recorded]
    if missing:
        raise SystemExit(f"--only: the record lacks the experiments {missing}; name them too")
    return [r for r in old["runs"] if r["experiment"] not in only]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--only", action="append", choices=sorted(EXPERIMENTS), help="rerun this experiment only, and merge"
    )
    args = parser.parse_args()
    only = args.only or list(EXPERIMENTS)
    kept = kept_runs(only) if args.only else []
    jobs = [
        (experiment, name, lr, seed, steps)
        for experiment, (names, lr, steps) in EXPERIMENTS.items()
        if experiment in only
        for name in names
        for seed in SEEDS
    ]
    start = time.perf_counter()
    new = []
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        for i, run in enumerate(pool.map(one_run, jobs), 1):
            new.append(run)
            print(
                f"[{time.perf_counter() - start:6.0f} s] {i}/{len(jobs)} {run['experiment']}: "
                f"{run['variant']}, lr {run['lr']:g}, seed {run['seed']}: {run['final']:.3f}",
                flush=True,
            )
    order = list(EXPERIMENTS)  # the runs in the order the whole script makes them
    runs = sorted(kept + new, key=lambda r: order.index(r["experiment"]))
    data = {"unigram": {str(s): unigram(s) for s in SEEDS}, "runs": runs}
    path = save_record("ch11_variants", data, script="scripts/record_ch11.py", settings=settings())
    print(f"wrote {path} ({len(new)} runs made, {len(kept)} kept, in {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
