"""Train the small GPT-2 shipped in ``gpt2ln/assets/tiny/`` (``gpt2ln.lab.tiny``, ``book/small_model.md``).

    python scripts/train_tiny.py                      # the shipped run, from scratch
    python scripts/train_tiny.py --out /tmp/tiny --steps 200

A byte-level (vocab 256) GPT-2, default ``GPT2Config`` apart from its sizes
(pre-norm LayerNorm, ``ln_f``, learned positions, tied embeddings, tanh GELU),
trained with ``gpt2ln.train`` on ``load_tokens("train")`` (34 plays) on the CPU
with ``--threads`` threads (default 1: deterministic on a given machine). The
arguments default to the shipped run. Writes to ``--out``:

- ``model.safetensors``: the weights under the hub's GPT-2 key names (no
  ``transformer.`` prefix, ``Conv1D`` layout), float32;
- ``config.json``: transformers' GPT-2 config, so ``gpt2ln.GPT2.from_pretrained(out)``
  and ``transformers.GPT2LMHeadModel.from_pretrained(out)`` both load the model;
- ``train_log.json``: both configs, the per-step training loss, the validation
  curve (``eval_batches`` random batches of the 3 validation plays every
  ``eval_interval`` steps), the final loss over the whole validation split
  (``gpt2ln.evaluate_loss``, windows of ``n_ctx``), wall time, versions, threads, seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from gpt2ln import GPT2, GPT2Config, TrainConfig, evaluate_loss, load_pretrained, load_tokens, train
from gpt2ln.lab.train import TrainHistory
from gpt2ln.model.loading import config_to_json

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "gpt2ln" / "assets" / "tiny"


def hf_config(config: GPT2Config) -> dict:
    """transformers' ``config.json`` for a GPT-2 of this shape (dropout as trained)."""
    return config_to_json(config)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-ctx", type=int, default=256, help="context = training block size")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=2600)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-interval", type=int, default=200)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: deterministic)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--rerun-check",
        type=int,
        default=0,
        metavar="N",
        help="instead: train N steps three times (same threads twice, then twice the threads) "
        "and write how close they land to OUT/rerun_check.json",
    )
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> tuple[GPT2Config, TrainConfig]:
    """The model and training configs the arguments ask for."""
    config = GPT2Config(
        vocab_size=256,
        n_ctx=args.n_ctx,
        n_embd=args.n_embd,
        n_layer=args.n_layer,
        n_head=args.n_head,
        dropout=args.dropout,
    )
    cfg = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        block_size=args.n_ctx,
        lr=args.lr,
        min_lr_ratio=args.min_lr_ratio,
        warmup_steps=args.warmup_steps,
        weight_decay=args.weight_decay,
        grad_clip=args.grad_clip,
        eval_interval=args.eval_interval,
        eval_batches=args.eval_batches,
        seed=args.seed,
        device="cpu",
        log_attn_max=False,
    )
    return config, cfg


def run(
    config: GPT2Config, cfg: TrainConfig, threads: int, progress: bool
) -> tuple[GPT2, TrainHistory, float]:
    """Seed, build and train the model on the training split -> (model, history, seconds)."""
    torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)  # the initial weights (train() reseeds for the batches)
    model = GPT2(config)
    print(
        f"GPT-2 {config.n_layer} layers, n_embd {config.n_embd}, {config.n_head} heads, "
        f"n_ctx {config.n_ctx}: {model.num_parameters():,} parameters; "
        f"{cfg.steps} steps of {cfg.tokens_per_step:,} tokens, {threads} thread(s)",
        flush=True,
    )
    t0 = time.perf_counter()
    history = train(model, load_tokens("train"), load_tokens("val"), cfg, progress=progress)
    seconds = time.perf_counter() - t0
    if history.diverged:
        sys.exit(f"training diverged at step {history.diverged_step}")
    return model, history, seconds


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.rerun_check:
        rerun_check(args)
        return
    config, cfg = build(args)
    model, history, train_s = run(config, cfg, args.threads, progress=not args.no_progress)
    val_data = load_tokens("val")
    t0 = time.perf_counter()
    val_loss = evaluate_loss(model, val_data, config.n_ctx)
    eval_s = time.perf_counter() - t0
    print(f"trained in {train_s / 60:.1f} min; validation loss {val_loss:.4f} nats/byte", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / "model.safetensors"
    save_file(model.to_hf_state_dict(prefix=""), str(weights), metadata={"format": "pt"})
    weights.chmod(0o644)  # safetensors creates it readable by its owner only
    (args.out / "config.json").write_text(json.dumps(hf_config(config), indent=2) + "\n")
    reloaded = evaluate_loss(load_pretrained(args.out), val_data, config.n_ctx)
    if abs(reloaded - val_loss) > 1e-6:
        sys.exit(f"the saved model gives validation loss {reloaded}, not {val_loss}")

    train_cfg = dataclasses.asdict(cfg)
    train_cfg["betas"] = list(cfg.betas)
    train_cfg["device"] = str(cfg.device)
    log = {
        "command": " ".join(["python scripts/train_tiny.py", *(sys.argv[1:] if argv is None else argv)]),
        "model_config": dataclasses.asdict(config),
        "train_config": train_cfg,
        "num_parameters": model.num_parameters(),
        "train_tokens": len(load_tokens("train")),
        "val_tokens": len(val_data),
        "train": {
            "step": history.step,
            "lr": history.lr,
            "loss": [round(x, 6) for x in history.ce],
            "grad_norm": [round(x, 6) for x in history.grad_norm],
        },
        "val": {"step": history.val_step, "loss": [round(x, 6) for x in history.val_loss]},
        "final_val_loss": val_loss,
        "final_val_loss_definition": "gpt2ln.evaluate_loss(model, load_tokens('val'), block_size=n_ctx)",
        "train_wall_s": round(train_s, 1),
        "eval_wall_s": round(eval_s, 1),
        "threads": args.threads,
        "seed": args.seed,
        **_environment(),
    }
    (args.out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"wrote {', '.join(sorted(p.name for p in args.out.iterdir()))} to {args.out}", flush=True)


def rerun_check(args: argparse.Namespace) -> None:
    """Train the first ``--rerun-check`` steps' worth of the run three times (twice on
    ``--threads`` threads, once on twice as many) and write how far apart they land
    to ``OUT/rerun_check.json``.

    The short runs use the shipped run's settings with ``steps`` = N (so a shorter
    cosine), warm-up capped at N // 2 and no periodic validation.
    """
    n = args.rerun_check
    config, cfg = build(args)
    cfg = cfg.replace(steps=n, warmup_steps=min(cfg.warmup_steps, n // 2), eval_interval=n, eval_batches=1)
    val_data = load_tokens("val")
    runs = []
    for threads in (args.threads, args.threads, 2 * args.threads):
        cpu = time.process_time()
        model, history, seconds = run(config, cfg, threads, progress=not args.no_progress)
        cpu = time.process_time() - cpu  # all threads' CPU time (includes building the model)
        torch.set_num_threads(args.threads)
        runs.append(
            {
                "threads": threads,
                "wall_s": round(seconds, 1),
                "cpu_s": round(cpu, 1),
                "loss": history.ce,
                "val_loss": evaluate_loss(model, val_data, config.n_ctx),
                "weights": model.state_dict(),
            }
        )

    def compare(a: dict, b: dict) -> dict:
        return {
            "threads": [a["threads"], b["threads"]],
            "identical_losses": a["loss"] == b["loss"],
            "max_abs_loss_diff": max(abs(x - y) for x, y in zip(a["loss"], b["loss"], strict=True)),
            "identical_weights": all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"]),
            "max_abs_weight_diff": max(
                (a["weights"][k] - b["weights"][k]).abs().max().item() for k in a["weights"]
            ),
            "val_loss": [a["val_loss"], b["val_loss"]],
            "val_loss_diff": abs(a["val_loss"] - b["val_loss"]),
        }

    out = {
        "command": " ".join(["python scripts/train_tiny.py", *(sys.argv[1:])]),
        "steps": n,
        "train_config": {**dataclasses.asdict(cfg), "betas": list(cfg.betas), "device": str(cfg.device)},
        "same_threads": compare(runs[0], runs[1]),
        "other_threads": compare(runs[0], runs[2]),
        "wall_s": [r["wall_s"] for r in runs],
        "cpu_s": [r["cpu_s"] for r in runs],
        **_environment(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rerun_check.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("same_threads", "other_threads", "wall_s", "cpu_s")}, indent=1))


def _environment() -> dict:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
