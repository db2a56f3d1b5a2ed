"""Make chapter 7's record: the decisive training runs, five times longer than the chapter's.

    python scripts/record_ch07.py              # writes gpt2ln/assets/records/ch07_long.json

Chapter 7 trains 4-layer byte-level GPT-2s for 200 steps live. Its question: is post-norm's
failure at the higher learning rate a matter of the initialization (GPT-2's, made for
pre-norm) or of the run length? This script trains the same models, with the same batches,
schedule shape (warm-up over the first fifth of the steps or none, cosine decay to a tenth)
and seeds, for ``--steps`` steps (default 1000): post-norm with GPT-2's init, post-norm with
Xavier-normal block matrices (``gpt2ln.exercises.ch07.xavier_blocks``) and pre-norm with
GPT-2's init, at the learning rates ``--lrs``, on the CPU with one thread per worker.
It records, per run, the final training loss (mean of the last 20 steps), the last
validation loss and the training loss every 10 steps.
"""

from __future__ import annotations

import argparse
import time

import torch

from gpt2ln import GPT2Config, TrainConfig
from gpt2ln.exercises.ch07 import train_with_init
from gpt2ln.lab.records import save_record
from gpt2ln.lab.seeds import TrainJob, run_jobs

SETUPS = (("post", "gpt2"), ("post", "xavier"), ("pre", "gpt2"))  # (norm_position, init)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--name", default="ch07_long")
    args = ap.parse_args()
    model = dict(vocab_size=256, n_ctx=64, n_embd=64, n_head=4, n_layer=4)
    train = dict(batch_size=8, block_size=32, eval_interval=args.steps, eval_batches=8)
    warmups = (0, args.steps // 5)
    keys, items = [], []
    for pos, init in SETUPS:
        for lr in args.lrs:
            for warmup in warmups:
                for seed in args.seeds:
                    cfg = TrainConfig(
                        steps=args.steps,
                        lr=lr,
                        warmup_steps=warmup,
                        seed=seed,
                        device=torch.device("cpu"),
                        log_attn_max=False,
                        **train,
                    )
                    job = TrainJob(GPT2Config(norm_position=pos, **model), cfg, init_seed=seed)
                    keys.append(dict(norm_position=pos, init=init, lr=lr, warmup=warmup, seed=seed))
                    items.append((job, init))
    start = time.perf_counter()
    results = run_jobs(train_with_init, items, args.workers)
    runs = []
    for key, r in zip(keys, results, strict=True):
        h = r.history
        runs.append(
            {
                **key,
                "final_train": sum(h.ce[-20:]) / 20,
                "final_val": h.val_loss[-1],
                "diverged": bool(h.diverged),
                "ce_every_10": [round(v, 4) for v in h.ce[::10]],
            }
        )
        print(key, f"train {runs[-1]['final_train']:.3f} val {runs[-1]['final_val']:.3f}")
    settings = dict(
        model=model,
        train=train,
        steps=args.steps,
        lrs=args.lrs,
        warmups=list(warmups),
        seeds=args.seeds,
        setups=[list(s) for s in SETUPS],
        threads_per_worker=1,
        torch=torch.__version__,
    )
    path = save_record(args.name, {"runs": runs}, script="scripts/record_ch07.py", settings=settings)
    print(f"{len(runs)} runs in {time.perf_counter() - start:.0f} s -> {path}")


if __name__ == "__main__":
    main()
