"""The live figures (gpt2ln.classroom.live_figures): the page's JavaScript formulas against gpt2ln, the
Python side's state, the HTML, and the notebook cells that show them.

The JavaScript (gpt2ln/assets/widgets/figures.js) runs under ``node``; these tests are
skipped, with one line saying why, where node is missing.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from nested_close import assert_nested_close

import gpt2ln
from gpt2ln import GPT2Config
from gpt2ln.classroom import live_figures as live

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "gpt2ln" / "assets" / "widgets" / "figures.js"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (apt-get install nodejs)")
TOL = 1e-5


def run_js(calls: list[tuple[str, dict, dict]]) -> list[dict]:
    """Evaluate figures.js's compute[kind](data, inputs) for each call, in node."""
    script = (
        f"const G = require({json.dumps(str(JS))});\n"
        "const calls = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
        "process.stdout.write(JSON.stringify(calls.map(([k, d, i]) => G.compute[k](d, i))));\n"
    )
    done = subprocess.run(
        [NODE, "-e", script], input=json.dumps(calls), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def close(a, b, tol: float = TOL, path: str = "") -> None:
    """Assert two JSON-like structures are equal, numbers to within tol."""
    assert_nested_close(a, b, tol, path)


def t64(v) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.float64)


# ---------------------------------------------------------------- the page's formulas vs gpt2ln

EXPLORER_INPUTS = [
    {"scale": 1.0, "shift": 0.0, "mistake": "none"},
    {"scale": 0.1, "shift": -4.3, "mistake": "eps_outside"},
    {"scale": 7.5, "shift": 2.0, "mistake": "bessel"},
    {"scale": 0.37, "shift": 0.6, "mistake": "wrong_axis"},
]


@needs_node
def test_js_layer_norm_and_rms_norm_equal_gpt2ln_on_fixed_inputs():
    fig = live.norm_explorer(n_features=16, seed=3)
    near_constant = [1.0 + 1e-3 * i for i in range(10)]  # variance ~ eps: where eps placement matters
    cases = [{**inp, "x": fig.data["x"]} for inp in EXPLORER_INPUTS]
    cases.append({"x": near_constant, "scale": 1.0, "shift": 0.0, "mistake": "none"})
    data = {**fig.data, "others": fig.data["others"]}
    outs = run_js([("norm_explorer", data, c) for c in cases[:-1]])
    short = live.norm_explorer(near_constant)
    outs += run_js([("norm_explorer", short.data, cases[-1])])
    for case, out in zip(cases, outs, strict=True):
        y = case["scale"] * t64(case["x"]) + case["shift"]
        close(out["input"], y.tolist())
        close(out["layer_norm"], gpt2ln.layer_norm(y, eps=1e-5).tolist())
        close(out["layer_norm"], F.layer_norm(y, y.shape, eps=1e-5).tolist())
        close(out["rms_norm"], gpt2ln.rms_norm(y, eps=1e-5).tolist())
        close(out["rms_norm"], F.rms_norm(y, y.shape, eps=1e-5).tolist())
        for panel, v in (
            ("input", y),
            ("layer_norm", gpt2ln.layer_norm(y, eps=1e-5)),
            ("rms_norm", gpt2ln.rms_norm(y, eps=1e-5)),
        ):
            s = out["stats"][panel]
            close(
                [s["mean"], s["std"], s["rms"]],
                [v.mean().item(), v.std(correction=0).item(), v.norm().item() / len(v) ** 0.5],
            )


@needs_node
def test_js_mistakes_equal_chapter_2s_formulas():
    fig = live.norm_explorer(n_features=12, seed=1)
    x = t64(fig.data["x"])
    others = t64(fig.data["others"])
    outs = run_js([("norm_explorer", fig.data, {"x": fig.data["x"], **inp}) for inp in EXPLORER_INPUTS[1:]])
    for inp, out in zip(EXPLORER_INPUTS[1:], outs, strict=True):
        y = inp["scale"] * x + inp["shift"]
        if inp["mistake"] == "eps_outside":
            wrong = (y - y.mean()) / (y.std(unbiased=False) + 1e-5)
        elif inp["mistake"] == "bessel":
            wrong = (y - y.mean()) * torch.rsqrt(y.var(unbiased=True) + 1e-5)
        else:  # normalize over the batch axis (dim 0) of [token; others]
            rows = torch.cat([y[None], others])
            wrong = F.batch_norm(rows, None, None, training=True, eps=1e-5)[0]
        close(out["mistake"]["output"], wrong.tolist())
        close(out["mistake"]["max_error"], (wrong - F.layer_norm(y, y.shape)).abs().max().item())
    errs = {o["mistake"]["name"]: o["mistake"]["max_error"] for o in outs}
    assert errs["wrong_axis"] > 0.5 and 1e-3 < errs["bessel"] < 0.2


@needs_node
def test_explorer_input_axis_is_fixed_and_js_marks_the_same_clipped_bars_as_python():
    fig = live.norm_explorer(seed=4)
    lim = fig.data["input_lim"]
    first = max(abs(v) for v in fig.data["x"])
    assert 2.5 * first <= lim < 2.5 * 2 * first, "the axis is a nice number just above 2.5x the first bars"
    assert fig.state()["outputs"]["clipped"] == []
    settings = ((10.0, 0.0), (1.0, 5.0))
    cases = [{"x": fig.data["x"], "scale": s, "shift": c, "mistake": "none"} for s, c in settings]
    for case, out in zip(cases, run_js([("norm_explorer", fig.data, c) for c in cases]), strict=True):
        y = case["scale"] * t64(case["x"]) + case["shift"]
        want = [i for i, v in enumerate(y.tolist()) if abs(v) > lim]
        assert out["clipped"] == want == live.norm_explorer_outputs(fig.data, case)["clipped"]
        assert want, "these settings run some bars off the fixed axis"


@pytest.mark.parametrize(
    ("v", "want"), [(0.07, 0.08), (1.0, 1.0), (1.01, 1.5), (5.29, 6.0), (8.1, 10.0), (31, 40)]
)
def test_nice_ceil_is_the_next_round_number(v, want):
    assert live.nice_ceil(v) == pytest.approx(want)


def _attention_row(
    q: torch.Tensor, keys: torch.Tensor, qk_norm: bool, norm: str = "rmsnorm"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores and softmax row of query q [D] against keys [T, D], from gpt2ln.CausalSelfAttention
    with QK-norm ``norm`` ("rmsnorm" or "layernorm", eps 1e-5) when ``qk_norm``.

    Two heads of D over d = 2D: head 0's queries read the first D features of each position and
    its keys the last D; position T - 1 holds the query and the last key, so its row sees every key.
    """
    T, D = keys.shape
    config = GPT2Config(
        vocab_size=8,
        n_ctx=T,
        n_embd=2 * D,
        n_head=2,
        n_layer=1,
        qk_norm=qk_norm,
        norm=norm,
        layer_norm_epsilon=1e-5,
    )
    attn = gpt2ln.CausalSelfAttention(config).double().eval()
    with torch.no_grad():
        attn.c_attn.weight.zero_()
        attn.c_attn.bias.zero_()
        attn.c_attn.weight[:D, :D] = torch.eye(D)  # head 0's query <- features 0..D-1
        attn.c_attn.weight[2 * D : 3 * D, D:] = torch.eye(D)  # head 0's key <- features D..2D-1
        x = torch.zeros(1, T, 2 * D, dtype=torch.float64)
        x[0, :, D:] = keys
        x[0, -1, :D] = q
        qk: list[torch.Tensor] = []  # the queries and keys the attention computes with (QK-norm applied)
        attn.attend.register_forward_pre_hook(lambda m, args: qk.extend(args[:2]))
        attn(x)
    scores = gpt2ln.attention_scores(*qk)  # [1, H, T, T], as run_with_cache records them
    return scores[0, 0, -1], scores.softmax(-1)[0, 0, -1]


def test_qk_norm_figure_uses_rmsnorm_by_default_with_gpt2s_eps():
    fig = live.qk_norm_explorer()
    assert fig.data["norm"] == fig.state()["inputs"]["norm"] == "rms_norm" and fig.data["eps"] == 1e-5
    assert live.qk_norm_explorer(norm="layer_norm").state()["outputs"]["norm"] == "layer_norm"


@needs_node
@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("scale", [0.1, 1.0, 3.7, 10.0])
def test_js_qk_norm_row_equals_gpt2ln_attention_with_and_without_qk_norm(scale, norm):
    fig = live.qk_norm_explorer(scale=1.0, seed=2)
    (out,) = run_js([("qk_norm", fig.data, {"scale": scale, "norm": norm})])
    assert out == json.loads(json.dumps(out)) and out["norm"] == norm
    close(out, live.qk_norm_outputs(fig.data, {"scale": scale, "norm": norm}), path="python")
    q, keys = scale * t64(fig.data["q"]), scale * t64(fig.data["keys"])
    model_norm = {"rms_norm": "rmsnorm", "layer_norm": "layernorm"}[norm]
    for key, qk_norm in (("plain", False), ("qk_norm", True)):
        scores, weights = _attention_row(q, keys, qk_norm, model_norm)
        close(out[key]["scores"], scores.tolist())
        close(out[key]["weights"], weights.tolist())
        close(out[key]["entropy"], torch.special.entr(weights).sum().item())
        close(out[key]["max_weight"], weights.max().item())
        assert out[key]["argmax"] == int(weights.argmax())
    close(out["uniform_entropy"], math.log(len(fig.data["keys"])))


@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
def test_qk_norm_row_does_not_change_with_the_scale_but_the_plain_row_saturates(norm):
    fig = live.qk_norm_explorer()
    small, big = (live.qk_norm_outputs(fig.data, {"scale": s, "norm": norm}) for s in (1.0, 10.0))
    assert big["plain"]["max_weight"] > 0.99 > small["plain"]["max_weight"]
    close(small["qk_norm"]["weights"], big["qk_norm"]["weights"], tol=1e-4)


def test_qk_norms_differ_only_by_centering_q_and_k():
    """RMSNorm and LayerNorm give different rows for this query (it is not centered), and equal
    rows once q and the keys are centered (then the two norms are the same map, up to eps)."""
    fig = live.qk_norm_explorer()
    rms, ln = (live.qk_norm_outputs(fig.data, {"scale": 1.0, "norm": n}) for n in live.QK_NORMS)
    diff = t64(rms["qk_norm"]["weights"]) - t64(ln["qk_norm"]["weights"])
    assert diff.abs().max() > 1e-3
    q, keys = t64(fig.data["q"]), t64(fig.data["keys"])
    centered = {
        **fig.data,
        "q": (q - q.mean()).tolist(),
        "keys": (keys - keys.mean(-1, keepdim=True)).tolist(),
    }
    rms, ln = (live.qk_norm_outputs(centered, {"scale": 1.0, "norm": n}) for n in live.QK_NORMS)
    close(rms["qk_norm"]["weights"], ln["qk_norm"]["weights"], tol=1e-9)


# ---------------------------------------------------------------- Python's state equals the page's


@needs_node
def test_python_state_equals_the_javascript_state_for_every_figure_kind():
    figs = [
        live.norm_explorer(scale=2.5, shift=-1.0, mistake="wrong_axis"),
        live.qk_norm_explorer(scale=4.0),
        live.qk_norm_explorer(scale=0.3, norm="layer_norm"),
        live.block_diagram(positions=live.POSITIONS, position="deepnorm", selected="attn"),
        live.residual_lens(prompts=["To be, or not to be", "HAMLET:\nThe rest is"], prompt=1, token=3),
    ]
    outs = run_js([(f.kind, f.data, f.state()["inputs"]) for f in figs])
    for fig, out in zip(figs, outs, strict=True):
        close(fig.state()["outputs"], out, tol=1e-9, path=fig.kind)


# ---------------------------------------------------------------- the block diagram


def test_block_diagram_counts_parameters_from_the_model():
    config = GPT2Config.from_preset("gpt2")
    fig = live.block_diagram(config)
    comps = fig.data["components"]
    ref = gpt2ln.LayerNorm(config.n_embd)
    assert comps["ln_1"]["params"] == sum(p.numel() for p in ref.parameters()) == 1536
    assert fig.data["ln_1_all_layers"] == 18432
    block = gpt2ln.Block(config)
    assert comps["attn"]["params"] == sum(p.numel() for p in block.attn.parameters())
    assert comps["mlp"]["params"] == sum(p.numel() for p in block.mlp.parameters())
    out = live.block_diagram_outputs(fig.data, {"position": "pre", "selected": "ln_1"})
    assert out["norm_params_total"] == 2 * 12 * 1536 + 1536
    rms = live.block_diagram(config.replace(norm="rmsnorm"))
    assert (
        rms.data["components"]["ln_1"]["params"] == 768
        and "05_rmsnorm" in rms.data["components"]["ln_1"]["link"]
    )


@pytest.mark.parametrize("position", live.POSITIONS)
def test_block_diagram_order_is_gpt2ln_blocks_call_order(position):
    config = GPT2Config(vocab_size=16, n_ctx=8, n_embd=16, n_head=2, n_layer=2, norm_position=position)
    block = gpt2ln.Block(config).eval()
    called: list[str] = []  # the block's components and residual dropouts, in the order they start
    for name, module in block.named_modules():
        top = name and "." not in name and not isinstance(module, gpt2ln.HookPoint)
        if top or name in ("attn.resid_dropout", "mlp.dropout"):
            module.register_forward_pre_hook(lambda m, i, name=name: called.append(name))
    with torch.no_grad():
        block(torch.randn(1, 4, 16))
    fig = live.block_diagram(config, positions=[position])
    order = live.block_diagram_outputs(fig.data, {"position": position, "selected": None})["order"]
    assert [n for n in order if n != "ln_f"] == called
    assert {"attn.resid_dropout", "mlp.dropout"} <= set(order)
    assert ("ln_f" in order) == config.use_final_norm


def test_block_diagrams_dropout_is_gpt2s_and_off_at_eval():
    from transformers import GPT2Config as HFConfig

    fig = live.block_diagram()
    assert fig.data["resid_pdrop"] == HFConfig().resid_pdrop == 0.1
    drop = fig.data["components"]["attn.resid_dropout"]
    assert drop["params"] == 0 and "p_resid = 0.1" in drop["what"] and "off at eval" in drop["what"]
    config = GPT2Config(vocab_size=16, n_ctx=8, n_embd=16, n_head=2, n_layer=1, dropout=0.1)
    block = gpt2ln.Block(config)
    x = torch.randn(1, 4, 16)
    with torch.no_grad():
        assert not torch.equal(block.train()(x), block(x)), "training: dropout draws a new mask"
        block.eval()
        assert torch.equal(block(x), block(x))
        no_drop = gpt2ln.Block(config.replace(dropout=0.0)).eval()
        no_drop.load_state_dict(block.state_dict())
        assert torch.equal(block(x), no_drop(x)), "eval: dropout is the identity"


def test_block_diagram_links_point_at_existing_sections():
    fig = live.block_diagram(positions=live.POSITIONS)
    for comp in fig.data["components"].values():
        page, _, anchor = comp["link"].partition("#")
        nb = ROOT / "notebooks" / page.replace(".html", ".ipynb")
        assert nb.is_file(), f"{comp['name']}: {page} is not a chapter"
        headings = [
            line.lstrip("#").strip()
            for cell in nbformat.read(nb, as_version=4).cells
            if cell.cell_type == "markdown"
            for line in cell.source.splitlines()
            if line.startswith("#")
        ]
        slugs = {re.sub(r"[^a-z0-9]+", "-", h.lower().replace("`", "")).strip("-") for h in headings}
        assert anchor in slugs, f"{comp['name']}: no section #{anchor} in {page}"


# ---------------------------------------------------------------- the residual stream


def test_residual_lens_data_equals_an_independent_recomputation():
    model, tok = gpt2ln.load_tiny()
    prompts = ["ROMEO:\nWhat is the matter", "Good night, good night!"]
    fig = live.residual_lens(model, tok, prompts=prompts)
    assert len(live.DEFAULT_PROMPTS) >= 20
    L = model.config.n_layer
    for text, row in zip(prompts, fig.data["prompts"], strict=True):
        idx = torch.tensor([tok.encode(text)])
        with torch.no_grad():
            # the stream by hand: embeddings, then each block (its output is the next block's input)
            x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
            stream = [x]
            for block in model.h:
                x = block(x)
                stream.append(x)
            ln = model.ln_f
            for l, xl in enumerate(stream):
                lens = F.layer_norm(xl[0], (xl.shape[-1],), ln.weight, ln.bias, ln.eps) @ model.wte.weight.T
                p = lens.softmax(-1)
                for t in range(idx.shape[1]):
                    assert abs(row["norms"][t][l] - xl[0, t].norm().item()) < 1e-3
                    assert row["top"][t][l] == tok.decode([int(p[t].argmax())])
                    assert abs(row["p"][t][l] - p[t].max().item()) < 1e-3
            after = F.layer_norm(stream[L][0], (x.shape[-1],), ln.weight, ln.bias, ln.eps).norm(dim=-1)
        close(row["lnf"], after.tolist(), tol=1e-3)
        assert "".join(row["tokens"]) == text


# ---------------------------------------------------------------- the HTML


def test_html_is_self_contained_with_unique_ids_and_a_readable_state():
    a, b = live.norm_explorer(), live.norm_explorer()
    page = a._repr_html_() + b._repr_html_()
    assert a.id != b.id and page.count(f'id="{a.id}"') == 1
    assert not re.search(r"\bsrc\s*=", page), "a figure loads something: it must be inline"
    no_ns = page.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace is a name, not a request
    assert "http://" not in no_ns and "https://" not in no_ns and "//cdn" not in no_ns
    for fig in (a, b):
        m = re.search(rf'id="{fig.id}" data-kind="norm_explorer" data-state="([^"]*)"', page)
        assert m, "no data-state on the figure's root"
        assert json.loads(html.unescape(m.group(1))) == fig.state()
        assert f'gpt2lnLib.mount("{fig.id}", "norm_explorer"' in page
    # every <script> closes where it should: the data cannot end it early
    assert page.count("<script>") == page.count("</script>") == 2


def test_each_figure_adds_less_than_300_kb():
    for fig in (
        live.norm_explorer(),
        live.qk_norm_explorer(),
        live.block_diagram(positions=live.POSITIONS),
        live.residual_lens(),
    ):
        size = len(fig._repr_html_().encode("utf-8"))
        assert size < 300_000, f"{fig.kind}: {size} bytes"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: live.norm_explorer([1.0, 2.0]), ValueError),
        (lambda: live.norm_explorer(mistake="nope"), ValueError),
        (lambda: live.norm_explorer(scale=0.0), ValueError),
        (lambda: live.qk_norm_explorer(q=torch.zeros(4), keys=torch.zeros(3, 5)), ValueError),
        (lambda: live.qk_norm_explorer(norm="batch_norm"), ValueError),
        (lambda: live.block_diagram(positions=["sideways"]), ValueError),
        (lambda: live.block_diagram({"n_embd": 4}), TypeError),
        (lambda: live.residual_lens(prompts=[]), ValueError),
    ],
)
def test_bad_inputs_raise_naming_what_was_expected(call, error):
    with pytest.raises(error, match="expected"):
        call()


# ---------------------------------------------------------------- the notebooks' live cells

LIVE_NOTEBOOKS = {
    "01_why_normalize": ["norm_explorer"],
    "05_rmsnorm": ["norm_explorer"],
    "07_pre_vs_post_norm": ["block_diagram"],
    "08_qk_norm": ["qk_norm"],
    "10_norms_inside_gpt2": ["residual_lens"],
    "11_beyond_layernorm": ["block_diagram"],
}
# Earlier cells a live cell needs beyond the setup and imports (matched by their source).
NEEDS = {"01_why_normalize": ["x16 = "]}
RECOMPUTE = {
    "norm_explorer": live.norm_explorer_outputs,
    "qk_norm": live.qk_norm_outputs,
    "block_diagram": live.block_diagram_outputs,
    "residual_lens": live.residual_lens_outputs,
}


def _live_cells_notebook(name: str) -> nbformat.NotebookNode:
    """The notebook's setup and import cells (before its first section), the cells NEEDS names,
    and its live-figure cells (ids starting with "live-"), in order."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    first_section = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "\n## " in "\n" + c.source
    )
    keep = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if (
            i < first_section
            or cell.id.startswith("live-")
            or any(s in cell.source for s in NEEDS.get(name, []))
        ):
            keep.append(cell)
    nb.cells = keep
    return nb


@pytest.mark.parametrize("name", sorted(LIVE_NOTEBOOKS))
def test_notebook_live_cells_run_and_show_their_figures_state(name):
    from nbclient import NotebookClient

    nb = _live_cells_notebook(name)
    assert any(c.id.startswith("live-") for c in nb.cells), f"{name}: no live-figure cell"
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
    ).execute()
    shown = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            page = output.get("data", {}).get("text/html", "")
            for kind, state in re.findall(
                r'class="gpt2ln-fig[^"]*" id="[^"]+" data-kind="(\w+)" data-state="([^"]*)"', page
            ):
                shown.append(kind)
                st = json.loads(html.unescape(state))
                data = json.loads(
                    re.search(r'gpt2lnLib\.mount\("[^"]+", "\w+", (.*)\);\n\}\)\(\);</script>', page).group(1)
                )
                close(
                    st["outputs"],
                    json.loads(json.dumps(RECOMPUTE[kind](data, st["inputs"]))),
                    path=f"{name}:{kind}",
                )
                if NODE:  # what the page will show, from the same data and inputs
                    close(st["outputs"], run_js([(kind, data, st["inputs"])])[0], path=f"{name}:{kind} (js)")
    assert shown == LIVE_NOTEBOOKS[name], f"{name}: figures shown {shown}"
