"""Chapter 11's record is what scripts/record_ch11.py makes, and --only merges safely."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from gpt2ln.lab.records import load_record

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("record_ch11", ROOT / "scripts" / "record_ch11.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_record_holds_every_run_of_the_script_in_its_order():
    script, record = _script(), load_record("ch11_variants")
    now = json.loads(json.dumps(script.settings()))
    for key in ("model", "train", "experiments", "seeds"):
        assert record["settings"][key] == now[key], key
    expected = [
        (experiment, name, seed)
        for experiment, (names, _lr, _steps) in script.EXPERIMENTS.items()
        for name in names
        for seed in script.SEEDS
    ]
    assert sorted((r["experiment"], r["variant"], r["seed"]) for r in record["runs"]) == sorted(expected)
    order = list(script.EXPERIMENTS)
    ranks = [order.index(r["experiment"]) for r in record["runs"]]
    assert ranks == sorted(ranks)
    assert "sqrt_d_control" in record["settings"]["experiments"]  # the control the chapter states


def test_only_keeps_the_other_experiments_and_refuses_other_settings(tmp_path, monkeypatch):
    script, record = _script(), load_record("ch11_variants")
    path = tmp_path / "ch11_variants.json"
    monkeypatch.setattr(script, "record_path", lambda name: path)
    path.write_text(json.dumps(record))
    kept = script.kept_runs(["sqrt_d_control"])
    assert kept and all(r["experiment"] != "sqrt_d_control" for r in kept)
    assert len(kept) == len(record["runs"]) - 6
    changed = copy.deepcopy(record)
    changed["settings"]["train"]["batch_size"] = 16
    path.write_text(json.dumps(changed))
    with pytest.raises(SystemExit, match="train"):
        script.kept_runs(["sqrt_d_control"])
    changed = copy.deepcopy(record)
    changed["settings"]["experiments"]["longer"]["steps"] = 300
    path.write_text(json.dumps(changed))
    with pytest.raises(SystemExit, match="longer"):
        script.kept_runs(["sqrt_d_control"])
    script.kept_runs(["longer"])  # rerunning the changed experiment itself is allowed
