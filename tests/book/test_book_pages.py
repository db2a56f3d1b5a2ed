"""The prose pages agree with the chapters: learning-path times, citations."""

import json
import math
import os
import re
from pathlib import Path

import pytest
import yaml

from gpt2ln.classroom.assign import exercise_index

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"


def _toc_notebooks() -> list[Path]:
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    return [ROOT / f"{doc}.ipynb" for doc in re.findall(r"file:\s*(notebooks/\S+)", toc)]


def _learning_path() -> dict[int, str]:
    """Chapter number -> the Exercises column of the learning-path table in book/intro.md."""
    page = (BOOK / "intro.md").read_text(encoding="utf-8")
    section = page.split("## A learning path", 1)[1].split(" ## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and (m := re.match(r"(\d+)\.\s", cells[1])):
            rows[int(m[1])] = cells[3]
    return rows


@pytest.mark.parametrize("path", _toc_notebooks(), ids=lambda p: p.name)
def test_learning_path_states_each_chapters_exercise_minutes(path):
    chapter = int(path.name.split("_")[0])
    rows = _learning_path()
    assert chapter in rows, f"book/intro.md's learning path has no row for chapter {chapter} ({path.name})"
    minutes = sum(r["minutes"] for r in exercise_index([path]))
    assert rows[chapter] == f"{minutes} min", (
        f"book/intro.md: chapter {chapter}'s exercises take {minutes} min by their headings, "
        f"the learning path says {rows[chapter]!r}"
    )


def test_every_reference_is_cited():
    bib = (BOOK / "references.bib").read_text(encoding="utf-8")
    keys = re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.M)
    assert keys, "no entries in book/references.bib"
    sources = [p.read_text(encoding="utf-8") for p in [*BOOK.glob("*.md"), *ROOT.glob("notebooks/*.ipynb")]]
    cited = {
        key.strip()
        for text in sources
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", text)
        for key in group.split(",")
    }
    uncited = sorted(set(keys) - cited)
    assert not uncited, f"entries of book/references.bib that no page cites: {uncited}"


def test_new_pages_are_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = {c["file"] for part in toc["parts"] for c in part["chapters"]}
    assert {"book/notation", "book/glossary"} <= files


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(page: str) -> str:
    """A page's text with its line breaks folded into spaces."""
    return " ".join((BOOK / page).read_text(encoding="utf-8").split())


def test_execution_page_states_the_budgets_that_check_exec_times_enforces():
    check = _script("check_exec_times")
    text = _prose("execution.md")
    stated: dict[int, int] = {}
    for seconds, chapters in re.findall(r"(\d+) s for chapters? ([\d, and]+?)[;.]", text):
        for n in re.findall(r"\d+", chapters):
            stated[int(n)] = int(seconds)
    chapters = sorted(int(p.name.split("_")[0]) for p in ROOT.glob("notebooks/*.ipynb"))
    assert stated == {n: check.BUDGETS.get(n, 60) for n in chapters}
    pages = re.search(r"(\d+) s for each of the pages ((?:\{doc\}`\w+`(?:, | and )?)+)", text)
    assert pages, "book/execution.md does not state the budget of the executed pages"
    assert {f"book/{p}": int(pages[1]) for p in re.findall(r"`(\w+)`", pages[2])} == check.PAGE_BUDGETS
    assert f"{check.TOTAL_BUDGET} s for all of them together" in text
    # what fails: a chapter that did not run, always; a budget overrun only in CI
    assert "fails if a chapter did not execute" in text and "fails the check only in CI" in text


def _gpt2_small_shapes():
    """GPT-2 small's config, and the parameter shapes and cache names of a model with its width
    but one block and a short context (the shapes do not depend on the depth)."""
    import torch

    from gpt2ln import GPT2, GPT2Config

    cfg = GPT2Config.from_preset("gpt2")
    model = GPT2(cfg.replace(n_layer=1, n_ctx=8))
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.zeros(1, 4, dtype=torch.long))
    return cfg, model, shapes, cache


def _table(page: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table after `heading` on a book page."""
    text = (BOOK / page).read_text(encoding="utf-8").split(heading, 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            if not set(line) <= set("|- "):
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[1:]  # without the header


def test_notation_page_gives_gpt2_smalls_sizes_and_config_fields():
    cfg, _, _, _ = _gpt2_small_shapes()
    rows = {r[0]: r for r in _table("notation.md", "## Shapes")}
    sizes = {
        "`d`": cfg.n_embd,
        "`H`": cfg.n_head,
        "`D`": cfg.head_dim,
        "`V`": cfg.vocab_size,
        "`L`": cfg.n_layer,
    }
    for symbol, value in sizes.items():
        assert rows[symbol][2] == str(value), f"notation.md: {symbol} is {value} in GPT-2 small"
        field = rows[symbol][3].strip("`")
        assert getattr(cfg, field) == value, f"notation.md: GPT2Config.{field} is not {symbol}"
    assert rows["`T`"][2] == f"≤ {cfg.n_ctx}" and rows["`T`"][3] == "`n_ctx`"
    eps = _prose("notation.md")
    assert f"$10^{{{round(math.log10(cfg.layer_norm_epsilon))}}}$ in GPT-2" in eps
    assert cfg.layer_norm_epsilon == 10 ** round(math.log10(cfg.layer_norm_epsilon))


def test_notation_page_gives_the_parameter_shapes_and_cache_names_of_gpt2ln():
    cfg, _, shapes, cache = _gpt2_small_shapes()
    d, n_ctx, V = cfg.n_embd, 8, cfg.vocab_size
    sizes = {"V": V, "d": d, "3d": 3 * d, "4d": 4 * d, "n_ctx": n_ctx}
    rows = {r[0]: r[2] for r in _table("notation.md", "## Names in the code")}

    def shape(cell: str) -> list[tuple[int, ...]]:
        return [tuple(sizes[s.strip()] for s in m.split(",")) for m in re.findall(r"`\[([^\]]+)\]`", cell)]

    assert shape(rows["`wte`"]) == [shapes["wte.weight"]] and shape(rows["`wpe`"]) == [shapes["wpe.weight"]]
    assert shape(rows["`c_attn`"]) == [shapes["h.0.attn.c_attn.weight"]]
    assert shape(rows["`c_proj`"]) == [shapes["h.0.attn.c_proj.weight"], shapes["h.0.mlp.c_proj.weight"]]
    assert shape(rows["`c_fc`"]) == [shapes["h.0.mlp.c_fc.weight"]]
    for ln in ("ln_1", "ln_2"):
        assert shape(rows[f"`{ln}`"]) == [shapes[f"h.0.{ln}.weight"]] == [shapes[f"h.0.{ln}.bias"]]
    assert shape(rows["`ln_f`"]) == [shapes["ln_f.weight"]]
    assert "`h.0.ln_1.weight`" in _prose("notation.md") and "h.0.ln_1.weight" in shapes
    named = re.findall(r"`(\w+)\.\{l\}`|`(ln_f\.out)`", _prose("notation.md").split("run_with_cache", 1)[1])
    names = {a or b for a, b in named}
    assert names == {k.rsplit(".", 1)[0] if k[-1].isdigit() else k for k in cache}, names


def test_glossary_counts_and_constants_match_the_package():
    from gpt2ln import GPT2, GPT2Config, LayerNorm

    text = _prose("glossary.md")
    cfg = GPT2Config.from_preset("gpt2")
    small_width = GPT2(cfg.replace(n_embd=24, n_head=2, n_ctx=8, vocab_size=16))  # GPT-2 small's depth
    n_ln = sum(isinstance(m, LayerNorm) for m in small_width.modules())
    assert n_ln == 2 * cfg.n_layer + 1
    assert f"GPT-2 small has {n_ln} of them" in text and f"each of its {cfg.n_layer} blocks" in text
    assert f"uses it {n_ln} times in its smallest size" in _prose("intro.md")
    assert cfg.vocab_size == 256 + 50_000 + 1 and f"$V = {cfg.vocab_size}$" in text
    assert "256 bytes, 50,000 merges and one end-of-text token" in text
    assert cfg.layer_norm_epsilon == 1e-5 and "$10^{-5}$ in GPT-2 (`layer_norm_epsilon`)" in text
    deep = cfg.replace(n_layer=6, norm_position="deepnorm")
    assert "$\\alpha = (2L)^{1/4}$, $\\beta = (8L)^{-1/4}$" in text
    assert math.isclose(deep.deepnorm_alpha, (2 * 6) ** 0.25)
    assert math.isclose(deep.deepnorm_beta, (8 * 6) ** -0.25)


def test_glossary_gelu_is_the_packages_gelu():
    import torch

    from gpt2ln.model.mlp import gelu

    text = _prose("glossary.md")
    assert "\\tanh(\\sqrt{2/\\pi}\\,(x + 0.044715\\,x^3))" in text
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    formula = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert torch.allclose(gelu(x), formula, rtol=0, atol=1e-12)


def _minutes(cell: str) -> int:
    m = re.fullmatch(r"(?:about )?(?:(\d+) h)? ?(?:(\d+) min)?", cell)
    assert m and (m[1] or m[2]), f"not a duration: {cell!r}"
    return 60 * int(m[1] or 0) + int(m[2] or 0)


def test_learning_path_totals_add_up():
    rows = _table("intro.md", "## A learning path")
    chapters = [r for r in rows if re.match(r"\d+\.", r[1])]
    part_one = next(r for r in rows if r[1] == "**Part I**")
    for r in chapters:  # "about" a total rounded to 5 minutes at most, so within 5 minutes
        total = _minutes(r[2]) + _minutes(r[3])
        assert abs(_minutes(r[4]) - total) <= 5, f"intro.md, {r[1]}: {r[2]} + {r[3]} is not {r[4]}"
    part = sum(_minutes(r[2]) + _minutes(r[3]) for r in chapters if r[0] == "I")
    assert abs(_minutes(part_one[4].strip("*")) - part) <= 10, f"Part I takes {part} min"


def test_how_to_use_states_the_python_floor_and_the_exercises_per_chapter():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    floor = re.search(r'^requires-python = "([^"]+)"$', pyproject, flags=re.M)[1]
    text = _prose("how_to_use.md")
    version = re.fullmatch(r">=(3\.\d+)", floor)[1]
    assert f"You need Python {version} or newer" in text, f"how_to_use.md does not state {floor}"
    assert f"Python {version}+" in (ROOT / "README.md").read_text(encoding="utf-8"), "README's Python floor"
    counts = {p.name: len(exercise_index([p])) for p in _toc_notebooks()}
    assert "Every chapter has at least two exercises" in text and min(counts.values()) >= 2, counts


def test_instructors_page_states_the_nbgrader_cell_timeout_of_the_course_config():
    from gpt2ln.classroom.nbgrader_course import CONFIG

    timeout = int(re.search(r"^c\.Execute\.timeout = (\d+)$", CONFIG, flags=re.M)[1])
    assert f"nbgrader's limit of 30 seconds per cell is raised to {timeout}" in _prose("instructors.md")
    try:
        from nbgrader.preprocessors import Execute
    except ImportError:
        return  # nbgrader's own default is checked where it is installed (CI)
    assert Execute.class_traits()["timeout"].default_value == 30


def test_how_to_use_states_the_packages_torch_floor():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    floor = re.search(r'^\s*"(torch>=[\d.]+)",$', pyproject, flags=re.M)[1]
    assert f"satisfies the package's `{floor}`" in _prose("how_to_use.md")


TRAINING_CHAPTERS = ("07_pre_vs_post_norm", "08_qk_norm", "11_beyond_layernorm")


def test_instructors_page_states_the_recorded_autograde_times():
    """The instructors page gives the CPU seconds of the autograde record; book/checked.md the
    wall-clock seconds and the load beside them (issue 27: no load averages for instructors)."""
    from gpt2ln.classroom import span as span_of

    record = json.loads((BOOK / "records" / "autograde.json").read_text(encoding="utf-8"))
    assert record["nbgrader"] == "0.9.6" and "HF_HUB_OFFLINE=1" in record["what"]
    assert set(record["chapters"]) == {p.stem for p in _toc_notebooks() if exercise_index([p])}
    plain = {ch: t for ch, t in record["chapters"].items() if ch not in TRAINING_CHAPTERS}
    training = {ch: record["chapters"][ch] for ch in TRAINING_CHAPTERS}

    def span(times: dict, key: str, fmt: str = ".0f") -> str:
        values = [t[key] for t in times.values()]
        return span_of(min(values), max(values), fmt)

    text = _prose("instructors.md")
    version = record["nbgrader"]
    assert f"`nbgrader autograde` ({version}) took {span(plain, 'cpu_s')} CPU seconds per chapter" in text
    assert f"and {span(training, 'cpu_s')} CPU seconds for chapters 7, 8 and 11" in text
    assert "load average" not in text and "wall-clock" not in text
    assert min(t["cpu_s"] for t in training.values()) > max(t["cpu_s"] for t in plain.values())
    checked = _prose("checked.md")
    plain_chapters = "chapters 1 to 6, 9 and 10"
    assert f"The wall-clock time was {span(plain, 'wall_s')} s per chapter for {plain_chapters}" in checked
    assert f"and {span(training, 'wall_s')} s for chapters 7, 8 and 11" in checked
    loads = (span(plain, "load1", ".1f"), span(training, "load1", ".1f"))
    assert f"(1-minute load averages of {loads[0]}, and of {loads[1]})" in checked
    if "with little else running" in checked:  # a quiet machine: say so only when it was
        assert max(t["load1"] for t in record["chapters"].values()) < 3
    if "their CPU time exceeds their wall-clock time" in checked:  # both cores, in every training chapter
        assert all(t["cpu_s"] > t["wall_s"] for t in training.values())


def test_checked_page_states_the_small_models_rerun_check():
    import importlib.resources

    tiny = importlib.resources.files("gpt2ln") / "assets" / "tiny"
    rerun = json.loads((tiny / "rerun_check.json").read_text(encoding="utf-8"))
    text = _prose("checked.md")
    assert f"`{rerun['command']}`" in text and f"for {rerun['steps']} steps three times" in text
    assert rerun["same_threads"]["threads"] == [1, 1] and rerun["other_threads"]["threads"] == [1, 2]
    for pair in (rerun["same_threads"], rerun["other_threads"]):  # "identical bit for bit in both pairs"
        assert pair["identical_losses"] and pair["identical_weights"] and pair["val_loss_diff"] == 0
    assert "a validation loss of at most 1.70" in text
    assert "assert val_loss <= 1.70" in (BOOK / "small_model.md").read_text(encoding="utf-8")


# book/checked.md, "How this book is checked": every number and name on it, from the code


def test_checked_page_is_in_the_appendices():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    appendices = next(p for p in toc["parts"] if p.get("caption") == "Appendices")
    assert "book/checked" in {c["file"] for c in appendices["chapters"]}


def test_checked_page_states_the_budgets_that_check_exec_times_enforces():
    check = _script("check_exec_times")
    text = _prose("checked.md")
    stated: dict[int, int] = {}
    for seconds, chapters in re.findall(r"(\d+) s for (chapters? [\d, and to]+?)[;.]", text):
        span = re.fullmatch(r"chapters (\d+) to (\d+)", chapters.strip())
        numbers = range(int(span[1]), int(span[2]) + 1) if span else map(int, re.findall(r"\d+", chapters))
        for n in numbers:
            stated[n] = int(seconds)
    chapters = sorted(int(p.name.split("_")[0]) for p in ROOT.glob("notebooks/*.ipynb"))
    assert stated == {n: check.BUDGETS.get(n, 60) for n in chapters}
    assert f"{check.TOTAL_BUDGET} s for all of them together" in text


def test_checked_page_states_the_seeds_of_chapter_seeds(monkeypatch):
    from gpt2ln.lab.seeds import SEED_ENV, chapter_seeds

    text = _prose("checked.md")
    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    monkeypatch.delenv(SEED_ENV, raising=False)
    seeds = chapter_seeds()
    assert f"{words[len(seeds)]} consecutive ones from a base seed" in text
    assert f"`{SEED_ENV}` sets (default {seeds[0]}, so seeds {seeds[0]}, {seeds[1]} and {seeds[2]})" in text
    monkeypatch.setenv(SEED_ENV, "1")
    s = chapter_seeds()
    assert f"`{SEED_ENV}=1` reruns the chapter on seeds {s[0]}, {s[1]} and {s[2]}" in text


def test_checked_page_states_the_floors_of_requirements_txt():
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    floors = dict(re.findall(r"^([\w-]+)>=([\d.]+)", requirements, flags=re.M))
    text = _prose("checked.md")
    stated = re.findall(r"`([\w-]+)>=([\d.]+)`", text)
    assert len(stated) >= 5
    for name, version in stated:
        assert floors.get(name) == version, f"checked.md: {name}>={version}, requirements: {floors.get(name)}"
    held = re.search(r'TORCH_SPEC:-(torch==[\d.]+)', (ROOT / "scripts" / "setup.sh").read_text())[1]
    assert f"(`{held}`)" in text


def test_checked_page_states_colabs_versions():
    pins = (ROOT / "tests" / "colab" / "colab-preinstalled.txt").read_text(encoding="utf-8")
    text = _prose("checked.md")
    colab_part = text.split("## The Colab lane", 1)[1].split(" ## ", 1)[0]
    stated = re.findall(r"`([\w-]+)==([\d.]+)`", colab_part)
    assert stated
    for name, version in stated:
        assert f"\n{name}=={version}\n" in pins, f"checked.md: {name}=={version} is not Colab's pin"
    torch = re.search(r"Colab: ([\d.]+)\+cpu", pins)[1]
    assert f"Colab's torch is {torch}" in text


def test_checked_page_states_the_pinned_commits():
    text = _prose("checked.md")
    sources = json.loads((BOOK / "quotes" / "sources.json").read_text(encoding="utf-8"))["sources"]
    rmsnorm = json.loads((BOOK / "quotes" / "bzhangGo-rmsnorm" / "source.json").read_text(encoding="utf-8"))
    for src in [*sources, rmsnorm]:
        assert f"| {src['repo']}," in text and f"| `{src['commit'][:7]}` |" in text, src["repo"]


def test_checked_page_states_the_kernel_switches_of_the_package():
    from gpt2ln.lab.fast import kernels as fused
    from gpt2ln.lab.fast import native

    text = _prose("checked.md")
    exponent = int(math.log2(fused.MIN_NUMEL))
    assert 2**exponent == fused.MIN_NUMEL
    mib = fused.MIN_NUMEL * 4 // 2**20
    assert f"`gpt2ln.lab.fast.kernels.MIN_NUMEL` = 2^{exponent} elements ({mib} MiB of float32)" in text
    assert "default `~/.cache/gpt2ln`" in text
    assert str(native._cache_dir()).endswith(".cache/gpt2ln") or "GPT2LN_CACHE" in os.environ
    # every GPT2LN_ variable the package and the notebooks read is on the page, and no other
    read = set()
    for path in [*ROOT.glob("gpt2ln/**/*.py"), *ROOT.glob("notebooks/*.ipynb")]:
        read |= set(re.findall(r"GPT2LN_[A-Z_]+", path.read_text(encoding="utf-8")))
    read.discard("GPT2LN_COMMON_H")  # a C include guard, not a variable
    named = set(re.findall(r"`(GPT2LN_[A-Z_]+)", text))
    assert named == read, (named, read)


def test_each_chapter_that_renders_a_record_names_the_script_that_rebuilds_it():
    """Issue 27: a committed record is rebuilt by a script in the repository, named on the page that
    renders it (in the chapter's text, not only in its code)."""
    root = Path(__file__).resolve().parents[2]
    records = root / "gpt2ln" / "assets" / "records"
    found = 0
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        for name in re.findall(r'load_record\("(\w+)"\)', code):
            found += 1
            script = json.loads((records / f"{name}.json").read_text(encoding="utf-8"))["script"]
            assert (root / script).is_file(), f"{name}: its script {script} is not in the repository"
            named = f"`{script}`" in text
            assert named, f"{path.name} renders the record {name}; its text does not name {script}"
    assert found >= 2, "expected the records of chapters 7 and 11"
