"""requirements.txt and pyproject.toml declare the same version ranges.

The floors lane (scripts/test_floors.sh) installs the lowest versions requirements.txt
allows; pyproject.toml is what `pip install gpt2ln` (and Colab's first cell) reads. A range
that differs between the two is a floor nobody tested.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def parse_requirements_txt(text: str) -> dict[str, Requirement]:
    """Requirements of a pip requirements file by canonical name (comments and options skipped)."""
    out: dict[str, Requirement] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as e:
            raise ValueError(f"requirements.txt line {n}: expected a requirement, got {raw!r} ({e})") from e
        name = canonicalize_name(req.name)
        if name in out:
            raise ValueError(f"requirements.txt line {n}: {req.name} is listed twice")
        out[name] = req
    return out


def pyproject_requirements(data: dict) -> dict[str, list[tuple[str, Requirement]]]:
    """Every requirement of [project] dependencies and optional-dependencies, by canonical name,
    with where it was declared ("dependencies" or "optional-dependencies.<extra>")."""
    project = data["project"]
    groups = [("dependencies", project.get("dependencies", []))]
    groups += [(f"optional-dependencies.{k}", v) for k, v in project.get("optional-dependencies", {}).items()]
    out: dict[str, list[tuple[str, Requirement]]] = {}
    for where, reqs in groups:
        for spec in reqs:
            req = Requirement(spec)
            if canonicalize_name(req.name) == canonicalize_name(project["name"]):
                continue  # an extra pulling in another extra, e.g. "gpt2ln[book]"
            out.setdefault(canonicalize_name(req.name), []).append((where, req))
    return out


def disagreements(txt: dict[str, Requirement], toml: dict[str, list[tuple[str, Requirement]]]) -> list[str]:
    """One line per package whose range differs between the two files, or that pyproject.toml
    declares and requirements.txt lacks (so the floors lane never installs it)."""
    problems = []
    for name, declared in sorted(toml.items()):
        if name not in txt:
            problems.append(f"{name}: in pyproject.toml ({declared[0][0]}), missing from requirements.txt")
            continue
        want = txt[name].specifier
        for where, req in declared:
            if req.specifier != want:
                problems.append(
                    f"{name}: pyproject.toml {where} has {str(req.specifier) or '(any)'}, "
                    f"requirements.txt has {str(want) or '(any)'}"
                )
    return problems


def test_every_pyproject_range_equals_the_requirements_txt_range():
    txt = parse_requirements_txt((ROOT / "requirements.txt").read_text())
    toml = pyproject_requirements(tomllib.loads((ROOT / "pyproject.toml").read_text()))
    assert toml, "pyproject.toml declares no dependencies"
    problems = disagreements(txt, toml)
    assert not problems, "pyproject.toml and requirements.txt disagree:\n" + "\n".join(problems)


def test_a_differing_range_is_reported():
    txt = parse_requirements_txt("transformers>=4.45  # comment\nnumpy>=1.26\n")
    toml = pyproject_requirements(
        {
            "project": {
                "name": "gpt2ln",
                "dependencies": ["numpy>=1.26"],
                "optional-dependencies": {"book": ["transformers>=5.0", "tqdm>=4.66", "gpt2ln[x]"]},
            }
        }
    )
    assert disagreements(txt, toml) == [
        "tqdm: in pyproject.toml (optional-dependencies.book), missing from requirements.txt",
        "transformers: pyproject.toml optional-dependencies.book has >=5.0, requirements.txt has >=4.45",
    ]


def test_ranges_compare_as_sets_and_names_canonically():
    txt = parse_requirements_txt("Huggingface_Hub>=0.24,<2\n")
    toml = pyproject_requirements(
        {"project": {"name": "gpt2ln", "dependencies": ["huggingface-hub<2,>=0.24"]}}
    )
    assert disagreements(txt, toml) == []


def test_a_bad_requirements_line_names_the_line():
    with pytest.raises(ValueError, match=r"line 2: expected a requirement, got 'numpy >= = 1'"):
        parse_requirements_txt("tqdm\nnumpy >= = 1\n")
    with pytest.raises(ValueError, match="line 2: tqdm is listed twice"):
        parse_requirements_txt("tqdm>=4\ntqdm<5\n")
