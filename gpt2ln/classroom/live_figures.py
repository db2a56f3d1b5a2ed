"""Live figures for the notebooks and the website: plain HTML + JavaScript, no kernel needed.

Each function returns a :class:`LiveFigure`. Displayed in Jupyter, Colab or VS Code (or
copied by myst-nb into a built page), it is one self-contained ``<div>``: the figure's
data as JSON and the JavaScript in ``gpt2ln/assets/widgets/figures.js`` inline, so the
page redraws as the reader drags, with no Python kernel and no network. Python computes
the data (from ``gpt2ln`` itself) and the figure's first state; the browser computes the
rest with the formulas in ``figures.js``, which ``tests/test_widgets.py`` checks against
``gpt2ln.layer_norm``, ``gpt2ln.rms_norm`` and ``gpt2ln.CausalSelfAttention``.

The figure's current inputs and outputs are on its root element, ``data-state`` (JSON
``{"kind", "inputs", "outputs"}``), and in the page at ``window.gpt2lnFigures[id].state()``.
"""

from __future__ import annotations

import html
import json
import math
import uuid
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import torch

from ..model.config import GPT2Config
from ..model.norms import layer_norm, rms_norm

JS_VERSION = "2"  # figures.js's VERSION: a page holding two versions loads the newest once
MISTAKES = ("none", "eps_outside", "bessel", "wrong_axis")
POSITIONS = ("pre", "post", "peri", "olmo2", "deepnorm")
QK_NORMS = ("rms_norm", "layer_norm")
# GPT-2's residual dropout in training: transformers' GPT2Config default resid_pdrop = 0.1
# (tests/test_widgets.py checks it). nn.Dropout is the identity after model.eval().
GPT2_RESID_PDROP = 0.1


@cache
def asset(name: str) -> str:
    """The text of ``gpt2ln/assets/widgets/<name>`` (``figures.js``, ``figures.css``)."""
    return resources.files("gpt2ln").joinpath("assets", "widgets", name).read_text(encoding="utf-8")


def _json(obj: Any) -> str:
    """JSON safe to put inside a <script> element."""
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


class LiveFigure:
    """One interactive figure: ``kind`` (a renderer in figures.js), its ``data``, its first ``state``."""

    def __init__(self, kind: str, data: dict, state: dict, title: str, fallback: str) -> None:
        self.kind, self.data, self.title, self.fallback = kind, data, title, fallback
        self.id = f"gpt2ln-{kind.replace('_', '-')}-{uuid.uuid4().hex[:10]}"
        self._state = {"kind": kind, **state}

    def state(self) -> dict:
        """The figure's inputs and outputs as Python computed them: ``{"kind", "inputs", "outputs"}``."""
        return json.loads(json.dumps(self._state))

    def _repr_html_(self) -> str:
        script = (
            "(function () {\n"
            f'if (!window.gpt2lnLib || window.gpt2lnLib.version < "{JS_VERSION}") {{\n'
            f"{asset('figures.js')}\n}}\n"
            f'window.gpt2lnLib.mount("{self.id}", "{self.kind}", {_json(self.data)});\n'
            "})();"
        )
        return (
            f'<div class="gpt2ln-fig tex2jax_ignore mathjax_ignore" id="{self.id}" data-kind="{self.kind}" '
            f'data-state="{html.escape(json.dumps(self._state), quote=True)}">'
            f"<style>{asset('figures.css')}</style>"
            f'<div class="g2-caption">{html.escape(self.title)}</div>'
            f'<div class="g2-body"><p class="g2-fallback">{html.escape(self.fallback)}</p></div>'
            f"<script>{script}</script></div>"
        )

    def __repr__(self) -> str:
        return f"LiveFigure({self.kind!r}, id={self.id!r})"


def _round(values: Sequence[float], digits: int = 6) -> list[float]:
    return [round(float(v), digits) for v in values]


def _stats(y: torch.Tensor) -> dict[str, float]:
    """mean, standard deviation (divide by d) and RMS of a vector [d]."""
    return {
        "mean": y.mean().item(),
        "std": y.var(correction=0).sqrt().item(),
        "rms": y.pow(2).mean().sqrt().item(),
    }


# ---------------------------------------------------------------- LayerNorm vs RMSNorm


def nice_ceil(v: float) -> float:
    """The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten that is >= v (v > 0)."""
    p = 10.0 ** math.floor(math.log10(v))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * p >= v * (1 - 1e-12):
            return float(round(m * p, 12))
    raise AssertionError(v)  # unreachable: 10 * p > v


def norm_explorer_outputs(data: dict, inputs: dict) -> dict:
    """What the norm explorer shows for ``inputs`` {x, scale, shift, mistake}, computed with gpt2ln.

    Float64 throughout; LayerNorm with ``data["eps_ln"]``, RMSNorm with ``data["eps_rms"]``,
    no gain or bias. The mistakes are chapter 2's, applied to the reader's token; the wrong
    axis normalizes each feature over a batch of that token and ``data["others"]``.
    ``clipped``: the features whose input bar leaves the input panel's fixed axis
    ``[-data["input_lim"], data["input_lim"]]`` (the page marks them).
    """
    if inputs["mistake"] not in MISTAKES:
        raise ValueError(f"norm_explorer: expected mistake in {MISTAKES}, got {inputs['mistake']!r}")
    x = torch.tensor(inputs["x"], dtype=torch.float64)
    y = inputs["scale"] * x + inputs["shift"]
    eps = data["eps_ln"]
    ln, rn = layer_norm(y, eps=eps), rms_norm(y, eps=data["eps_rms"])
    out = {
        "input": y.tolist(),
        "layer_norm": ln.tolist(),
        "rms_norm": rn.tolist(),
        "stats": {"input": _stats(y), "layer_norm": _stats(ln), "rms_norm": _stats(rn)},
        "clipped": [i for i, v in enumerate(y.tolist()) if abs(v) > data["input_lim"]],
        "mistake": None,
    }
    name = inputs["mistake"]
    if name != "none":
        c = y - y.mean()
        if name == "eps_outside":
            wrong = c / (y.var(correction=0).sqrt() + eps)
        elif name == "bessel":
            wrong = c / (y.var(correction=1) + eps).sqrt()
        else:  # wrong_axis: statistics over the batch of tokens, for each feature
            rows = torch.cat([y[None], torch.tensor(data["others"], dtype=torch.float64)])  # [B, d]
            wrong = layer_norm(rows.T, eps=eps).T[0]
        out["mistake"] = {
            "name": name,
            "output": wrong.tolist(),
            "max_error": (wrong - ln).abs().max().item(),
        }
    return out


def norm_explorer(
    x: torch.Tensor | Sequence[float] | None = None,
    scale: float = 1.0,
    shift: float = 0.0,
    mistake: str = "none",
    n_features: int = 12,
    eps_ln: float = 1e-5,
    eps_rms: float = 1e-5,
    scale_range: tuple[float, float] = (0.1, 10.0),
    shift_range: tuple[float, float] = (-5.0, 5.0),
    seed: int = 0,
) -> LiveFigure:
    """LayerNorm vs RMSNorm on one token: draggable feature bars, a scale and a shift slider.

    ``x``: the token's features ``[d]``, 8 <= d <= 16 (default: ``n_features`` draws from
    N(0, 1) with ``seed``). The page shows ``scale * x + shift``, its LayerNorm and its
    RMSNorm, each with mean, std and RMS, and optionally one of chapter 2's classic mistakes
    (``mistake`` in ``"none"``, ``"eps_outside"``, ``"bessel"``, ``"wrong_axis"``) with its error.

    The input panel's axis is fixed for the figure's life at ``[-input_lim, input_lim]``,
    ``input_lim = nice_ceil(2.5 * max|scale * x + shift|)`` at the first state: moving the
    scale slider grows and shrinks the bars on screen (2.5x or more before the tallest reaches
    the edge) while the normalized panels stay put. Bars beyond the axis are drawn to its
    edge and marked as clipped. ``eps_rms`` defaults to 1e-5, GPT-2's LayerNorm eps, so the
    two norms are compared like for like.
    """
    gen = torch.Generator().manual_seed(seed)
    if x is None:
        x = torch.randn(n_features, generator=gen, dtype=torch.float64)
    x = torch.as_tensor(x, dtype=torch.float64)
    if x.ndim != 1 or not 8 <= x.shape[0] <= 16:
        raise ValueError(f"norm_explorer: expected x of shape [d] with 8 <= d <= 16, got {tuple(x.shape)}")
    lo, hi = scale_range
    if not (0 < lo <= scale <= hi):
        raise ValueError(f"norm_explorer: expected 0 < {lo} <= scale <= {hi}, got scale={scale}")
    if not shift_range[0] <= shift <= shift_range[1]:
        raise ValueError(f"norm_explorer: expected shift in {shift_range}, got {shift}")
    others = torch.randn(3, x.shape[0], generator=gen, dtype=torch.float64) * 1.5 + 0.5
    first = (scale * x + shift).abs().max().item()
    data = {
        "x": _round(x.tolist()),
        "scale": float(scale),
        "shift": float(shift),
        "mistake": mistake,
        "eps_ln": eps_ln,
        "eps_rms": eps_rms,
        "others": [_round(r) for r in others.tolist()],
        "scale_range": [float(lo), float(hi)],
        "shift_range": [float(v) for v in shift_range],
        "input_lim": nice_ceil(max(2.5 * first, 0.5)),
    }
    inputs = {"x": data["x"], "scale": data["scale"], "shift": data["shift"], "mistake": mistake}
    return LiveFigure(
        "norm_explorer",
        data,
        {"inputs": inputs, "outputs": norm_explorer_outputs(data, inputs)},
        title=f"LayerNorm vs RMSNorm on one token of {x.shape[0]} features",
        fallback="This live figure needs JavaScript; the static figure below shows the same panels.",
    )


# ---------------------------------------------------------------- QK-norm


def qk_norm_outputs(data: dict, inputs: dict) -> dict:
    """One query's softmax row over the keys, queries and keys scaled by ``inputs["scale"]``,
    without and with QK-norm, with gpt2ln: ``inputs["norm"]`` (default ``data["norm"]``) is
    ``"rms_norm"`` (RMSNorm, as Gemma 3, OLMo 2 and Qwen 3 do) or ``"layer_norm"``, over the
    head dimension, gain 1 (and bias 0), eps ``data["eps"]``."""
    s = inputs["scale"]
    norm = inputs.get("norm", data["norm"])
    if norm not in QK_NORMS:
        raise ValueError(f"qk_norm: expected norm in {QK_NORMS}, got {norm!r}")
    q = s * torch.tensor(data["q"], dtype=torch.float64)  # [D]
    k = s * torch.tensor(data["keys"], dtype=torch.float64)  # [T, D]
    c = 1 / math.sqrt(q.shape[0])

    def row(scores: torch.Tensor) -> dict:
        p = torch.softmax(scores, dim=-1)
        return {
            "scores": scores.tolist(),
            "weights": p.tolist(),
            "entropy": torch.special.entr(p).sum().item(),
            "max_weight": p.max().item(),
            "argmax": int(p.argmax()),
            "max_abs_score": scores.abs().max().item(),
        }

    f = rms_norm if norm == "rms_norm" else layer_norm
    qh, kh = f(q, eps=data["eps"]), f(k, eps=data["eps"])
    return {
        "norm": norm,
        "plain": row(k @ q * c),
        "qk_norm": row(kh @ qh * c),
        "uniform_entropy": math.log(k.shape[0]),
    }


def qk_norm_explorer(
    q: torch.Tensor | None = None,
    keys: torch.Tensor | None = None,
    scale: float = 1.0,
    scale_range: tuple[float, float] = (0.1, 10.0),
    head_dim: int = 16,
    n_keys: int = 8,
    norm: str = "rms_norm",
    eps: float = 1e-5,
    seed: int = 0,
) -> LiveFigure:
    """One attention row as the queries and keys grow: a slider multiplies q ``[D]`` and
    keys ``[T, D]`` by ``scale``; the page shows softmax(q.k / sqrt(D)) without and with
    QK-norm, with the entropy (nats) and the largest weight of each. QK-norm is RMSNorm
    (``norm="rms_norm"``, as Gemma 3, OLMo 2 and Qwen 3) or LayerNorm (``"layer_norm"``, as
    ViT-22B), switched by the reader; ``eps`` is passed explicitly to both (default 1e-5,
    GPT-2's LayerNorm eps)."""
    if norm not in QK_NORMS:
        raise ValueError(f"qk_norm_explorer: expected norm in {QK_NORMS}, got {norm!r}")
    gen = torch.Generator().manual_seed(seed)
    q = (
        torch.randn(head_dim, generator=gen, dtype=torch.float64)
        if q is None
        else torch.as_tensor(q).double()
    )
    if keys is None:
        keys = torch.randn(n_keys, q.shape[0], generator=gen, dtype=torch.float64)
    keys = torch.as_tensor(keys).double()
    if q.ndim != 1 or keys.ndim != 2 or keys.shape[1] != q.shape[0]:
        raise ValueError(
            f"qk_norm_explorer: expected q [D] and keys [T, D], got {tuple(q.shape)} and {tuple(keys.shape)}"
        )
    if not scale_range[0] <= scale <= scale_range[1]:
        raise ValueError(f"qk_norm_explorer: expected scale in {scale_range}, got {scale}")
    data = {
        "q": _round(q.tolist()),
        "keys": [_round(r) for r in keys.tolist()],
        "eps": eps,
        "norm": norm,
        "scale": float(scale),
        "scale_range": [float(v) for v in scale_range],
    }
    inputs = {"scale": float(scale), "norm": norm}
    return LiveFigure(
        "qk_norm",
        data,
        {"inputs": inputs, "outputs": qk_norm_outputs(data, inputs)},
        title=f"One query against {keys.shape[0]} keys (head dimension D = {q.shape[0]}), "
        "without and with QK-norm (RMSNorm or LayerNorm of q and k)",
        fallback="This live figure needs JavaScript; the figures above show the same effect.",
    )


# ---------------------------------------------------------------- the block diagram

_LAYOUTS: dict[str, dict] = {
    "pre": {
        "label": "pre-norm (GPT-2)",
        "formula": "x = x + attn(ln_1(x));   x = x + mlp(ln_2(x))",
        "steps": [
            {"branch": ["ln_1", "attn", "attn.resid_dropout"]},
            {"branch": ["ln_2", "mlp", "mlp.dropout"]},
        ],
    },
    "post": {
        "label": "post-norm (GPT-1)",
        "formula": "x = ln_1(x + attn(x));   x = ln_2(x + mlp(x))",
        "steps": [
            {"branch": ["attn", "attn.resid_dropout"]},
            {"node": "ln_1"},
            {"branch": ["mlp", "mlp.dropout"]},
            {"node": "ln_2"},
        ],
    },
    "peri": {
        "label": "Peri-LN",
        "formula": "x = x + ln_attn_out(attn(ln_1(x)));   x = x + ln_mlp_out(mlp(ln_2(x)))",
        "steps": [
            {"branch": ["ln_1", "attn", "attn.resid_dropout", "ln_attn_out"]},
            {"branch": ["ln_2", "mlp", "mlp.dropout", "ln_mlp_out"]},
        ],
    },
    "olmo2": {
        "label": "OLMo 2's order",
        "formula": "x = x + ln_1(attn(x));   x = x + ln_2(mlp(x))",
        "steps": [
            {"branch": ["attn", "attn.resid_dropout", "ln_1"]},
            {"branch": ["mlp", "mlp.dropout", "ln_2"]},
        ],
    },
    "deepnorm": {
        "label": "DeepNorm",
        "formula": "x = ln_1(α·x + attn(x));   x = ln_2(α·x + mlp(x))",
        "steps": [
            {"branch": ["attn", "attn.resid_dropout"], "alpha": True},
            {"node": "ln_1"},
            {"branch": ["mlp", "mlp.dropout"], "alpha": True},
            {"node": "ln_2"},
        ],
    },
}

# Where the course builds each component: (page relative to a chapter, link text).
DEFAULT_LINKS: dict[str, tuple[str, str]] = {
    "layernorm": ("02_layernorm.html#the-official-formula", "chapter 2, The official formula"),
    "rmsnorm": ("05_rmsnorm.html#the-formula", "chapter 5, The formula"),
    "attn": (
        "06_attention_and_mlp.html#c-attn-one-matrix-for-queries-keys-and-values",
        "chapter 6, c_attn: one matrix for queries, keys and values",
    ),
    "mlp": ("06_attention_and_mlp.html#the-mlp", "chapter 6, The MLP"),
    "dropout": (
        "06_attention_and_mlp.html#checking-against-gpt2ln-and-transformers",
        "chapter 6, Checking against gpt2ln and transformers",
    ),
    "ln_f": ("07_pre_vs_post_norm.html#why-pre-norm-needs-ln-f", "chapter 7, Why pre-norm needs ln_f"),
    "peri": (
        "11_beyond_layernorm.html#where-the-norm-goes-five-placements",
        "chapter 11, Where the norm goes: five placements",
    ),
}


def block_layout(position: str) -> dict:
    """The diagram of one block: ``steps``, each a ``{"branch": [...]}`` sub-layer path added
    back to the stream (``"alpha"``: DeepNorm's scaled bypass) or a ``{"node": name}`` on the stream.
    Names are ``gpt2ln.Block`` submodules: the residual dropouts are ``attn.resid_dropout`` and
    ``mlp.dropout``, applied to each sub-layer's output before the sum (GPT-2 and gpt2ln alike)."""
    if position not in _LAYOUTS:
        raise ValueError(f"block_layout: expected position in {POSITIONS}, got {position!r}")
    return json.loads(json.dumps(_LAYOUTS[position]))


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def block_diagram(
    config: GPT2Config | None = None,
    positions: Sequence[str] = ("pre", "post"),
    position: str | None = None,
    selected: str = "ln_1",
    links: dict[str, tuple[str, str]] | None = None,
    resid_pdrop: float = GPT2_RESID_PDROP,
) -> LiveFigure:
    """The transformer block as a diagram with its residual bypass, for each norm placement
    in ``positions`` (``"pre"``, ``"post"``, ``"peri"``, ``"olmo2"``, ``"deepnorm"``),
    switched by the reader. Every component shows its shapes and its parameter count,
    counted on a ``gpt2ln.GPT2`` built from ``config`` (default GPT-2 small) on the meta
    device (no memory), and links to the section that builds it. The residual dropouts
    (``resid_pdrop``, GPT-2's 0.1 in training; off at eval) sit on each branch before the sum."""
    from ..model.blocks import Block
    from ..model.gpt2 import GPT2

    config = config or GPT2Config.from_preset("gpt2")
    if not isinstance(config, GPT2Config):
        raise TypeError(f"block_diagram: expected a GPT2Config, got {type(config).__name__}")
    positions = list(positions)
    bad = [p for p in positions if p not in POSITIONS]
    if bad or not positions:
        raise ValueError(f"block_diagram: expected positions from {POSITIONS}, got {positions}")
    position = position or positions[0]
    if position not in positions:
        raise ValueError(f"block_diagram: expected position in {positions}, got {position!r}")
    links = {**DEFAULT_LINKS, **(links or {})}
    d, H, D, V, L = config.n_embd, config.n_head, config.head_dim, config.vocab_size, config.n_layer

    with torch.device("meta"):
        model = GPT2(config.replace(norm_position="pre", final_norm=True))
        blocks = {p: Block(config.replace(norm_position=p)) for p in positions}
    stream = f"[B, T, {d}]"
    norm_kind = "rmsnorm" if config.norm == "rmsnorm" else "layernorm"
    norm_word = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}.get(config.norm, config.norm)
    components: dict[str, dict] = {}

    def add(
        name: str,
        module: torch.nn.Module,
        what: str,
        link_key: str,
        is_norm: bool,
        out: str = stream,
        lead: str = "Built in",
    ):
        href, text = links[link_key]
        components[name] = {
            "name": name,
            "params": _count(module),
            "shape_in": stream,
            "shape_out": out,
            "what": what,
            "link": href,
            "link_text": text,
            "link_lead": lead,
            "is_norm": is_norm,
        }

    b0 = model.h[0]
    add(
        "ln_1",
        b0.ln_1,
        f"{norm_word} of the attention sub-block, over the {d} features of each token.",
        norm_kind,
        True,
    )
    add(
        "ln_2",
        b0.ln_2,
        f"{norm_word} of the MLP sub-block, over the {d} features of each token.",
        norm_kind,
        True,
    )
    add(
        "attn",
        b0.attn,
        f"Causal self-attention: c_attn [{d} → {3 * d}] makes q, k, v; {H} heads of "
        f"D = {D} ([B, {H}, T, {D}]); c_proj [{d} → {d}].",
        "attn",
        False,
    )
    add("mlp", b0.mlp, f"The MLP: c_fc [{d} → {4 * d}], GELU, c_proj [{4 * d} → {d}].", "mlp", False)
    for name, what in (("attn.resid_dropout", "the attention's output"), ("mlp.dropout", "the MLP's output")):
        add(
            name,
            b0.get_submodule(name),
            f"Residual dropout on {what}, before it is added to the stream: in training GPT-2 "
            f"zeroes each value with probability p_resid = {resid_pdrop:g} and scales the rest by "
            f"1/(1 − p). It is off at eval (model.eval() makes nn.Dropout the identity); this "
            f"model's dropout is {config.dropout:g}.",
            "dropout",
            False,
            lead="Turned off for the comparisons in",
        )
    add(
        "ln_f",
        model.ln_f,
        f"The final {norm_word}, after the last block; then wte.T gives the logits [B, T, {V}].",
        "ln_f",
        True,
    )
    if "peri" in blocks:
        pb = blocks["peri"]
        add("ln_attn_out", pb.ln_attn_out, f"Peri-LN's {norm_word} on the attention's output.", "peri", True)
        add("ln_mlp_out", pb.ln_mlp_out, f"Peri-LN's {norm_word} on the MLP's output.", "peri", True)
    for p, block in blocks.items():  # every component of every placement is counted on its own block
        for step in _LAYOUTS[p]["steps"]:
            for name in step.get("branch", [step.get("node")]):
                assert _count(block.get_submodule(name)) == components[name]["params"], (p, name)

    layouts = {}
    for p in positions:
        layouts[p] = {**block_layout(p), "final_norm": config.replace(norm_position=p).use_final_norm}
    data = {
        "positions": positions,
        "position": position,
        "selected": selected,
        "layouts": layouts,
        "components": components,
        "n_layer": L,
        "deepnorm_alpha": config.deepnorm_alpha,
        "resid_pdrop": resid_pdrop,
        "dropout": config.dropout,
        "ln_1_all_layers": sum(_count(b.ln_1) for b in model.h),
        "config": {"n_embd": d, "n_head": H, "n_layer": L, "vocab_size": V, "norm": config.norm},
    }
    inputs = {"position": position, "selected": selected}
    return LiveFigure(
        "block_diagram",
        data,
        {"inputs": inputs, "outputs": block_diagram_outputs(data, inputs)},
        title=f"One block of a {L}-layer model with d = {d} ({norm_word}): where the norms sit",
        fallback="This live figure needs JavaScript.",
    )


def block_diagram_outputs(data: dict, inputs: dict) -> dict:
    """The components in order, the norm parameter totals and the selected component."""
    layout = data["layouts"][inputs["position"]]
    order = [n for step in layout["steps"] for n in step.get("branch", [step.get("node")])]
    if layout["final_norm"]:
        order.append("ln_f")
    comps = data["components"]
    per_block = sum(comps[n]["params"] for n in order if comps[n]["is_norm"] and n != "ln_f")
    sel = inputs.get("selected")
    return {
        "order": order,
        "norm_params_per_block": per_block,
        "norm_params_all_blocks": per_block * data["n_layer"],
        "norm_params_total": per_block * data["n_layer"]
        + (comps["ln_f"]["params"] if layout["final_norm"] else 0),
        "selected": comps[sel] if sel in order else None,
    }


# ---------------------------------------------------------------- residual stream and logit lens

DEFAULT_PROMPTS = (
    "ROMEO:\nWhat is the matter",
    "To be, or not to be",
    "O Romeo, Romeo! wherefore",
    "Now is the winter of our",
    "Friends, Romans, country",
    "All the world's a stage",
    "Good night, good night!",
    "What light through yonder",
    "My lord, I will not go",
    "Thou art a villain",
    "JULIET:\nO, swear not by",
    "The king is dead",
    "I pray you, sir, tell me",
    "First Citizen:\nWe are",
    "Come, let us go in",
    "KING HENRY:\nOnce more",
    "MENENIUS:\nWhat work's",
    "Is this a dagger which",
    "Now, good my lord,",
    "And so, farewell, my",
    "What say you, madam?",
    "HAMLET:\nThe rest is",
)


@torch.no_grad()
def residual_lens_data(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str]) -> list[dict]:
    """For each prompt and each of its tokens: ``norms`` ``[L + 1]`` (‖resid_pre.l‖), ``lnf``
    (‖ln_f's output‖), and the logit lens's ``top`` next token and its probability ``p`` at
    each layer: ``softmax(ln_f(resid_pre.l) @ wte.T)``. Layer L's lens is the model's output."""
    out = []
    L = model.config.n_layer
    for text in prompts:
        ids = tokenizer.encode(text)
        logits, cache = model.run_with_cache(torch.tensor([ids]))
        resid = torch.stack([cache[f"resid_pre.{l}"][0] for l in range(L + 1)])  # [L + 1, T, d]
        lens = model.ln_f(resid) @ model.wte.weight.T  # [L + 1, T, vocab]
        if not torch.allclose(lens[L], logits[0], atol=1e-4, rtol=1e-4):
            raise RuntimeError("residual_lens_data: the top layer's lens differs from the model's logits")
        probs = lens.softmax(-1)
        p, top = probs.max(-1)  # [L + 1, T]
        out.append(
            {
                "text": text,
                "tokens": [tokenizer.decode([i]) for i in ids],
                "norms": [_round(v, 4) for v in resid.norm(dim=-1).T.tolist()],  # [T][L + 1]
                "lnf": _round(cache["ln_f.out"][0].norm(dim=-1).tolist(), 4),
                "top": [[tokenizer.decode([i]) for i in col] for col in top.T.tolist()],
                "p": [_round(v, 4) for v in p.T.tolist()],
            }
        )
    return out


def residual_lens_outputs(data: dict, inputs: dict) -> dict:
    """The selected prompt and token's norms and logit lens (a lookup in ``data``)."""
    pr = data["prompts"][inputs["prompt"]]
    t = inputs["token"]
    if not 0 <= t < len(pr["tokens"]):
        raise ValueError(f"residual_lens: expected token in 0..{len(pr['tokens']) - 1}, got {t}")
    return {
        "text": pr["text"],
        "token": pr["tokens"][t],
        "context": "".join(pr["tokens"][: t + 1]),
        "norms": pr["norms"][t],
        "norm_after_ln_f": pr["lnf"][t],
        "top": pr["top"][t],
        "p_top": pr["p"][t],
        "model_prediction": pr["top"][t][-1],
    }


def residual_lens(
    model: torch.nn.Module | None = None,
    tokenizer: Any = None,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    prompt: int = 0,
    token: int = -1,
) -> LiveFigure:
    """The residual stream of a model (default: the shipped small GPT-2, ``gpt2ln.load_tiny()``):
    the reader picks a prompt and a token and sees ‖x‖ at every layer, after ``ln_f``, and the
    logit lens's top prediction per layer. Everything is computed here and embedded as data."""
    if model is None:
        from ..lab.tiny import load_tiny

        model, tokenizer = load_tiny()
    if tokenizer is None:
        raise ValueError("residual_lens: expected a tokenizer with the model, got None")
    if not prompts:
        raise ValueError("residual_lens: expected at least one prompt, got none")
    rows = residual_lens_data(model, tokenizer, prompts)
    token = token % len(rows[prompt]["tokens"])
    data = {"prompts": rows, "prompt": prompt, "token": token, "n_layer": model.config.n_layer}
    inputs = {"prompt": prompt, "token": token}
    return LiveFigure(
        "residual_lens",
        data,
        {"inputs": inputs, "outputs": residual_lens_outputs(data, inputs)},
        title=f"The residual stream of a {model.config.n_layer}-layer model, token by token",
        fallback="This live figure needs JavaScript; the table above shows one token.",
    )
