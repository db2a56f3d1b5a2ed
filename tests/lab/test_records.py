"""Records: load from the package, name the available ones on a typo, save with their provenance."""

import pytest

from gpt2ln.lab import records


def test_a_record_loads_from_the_package():
    assert records.load_record("example")["example"] == [1, 2, 3]


def test_a_missing_record_names_the_ones_that_exist():
    with pytest.raises(FileNotFoundError, match="expected one of .*'example'"):
        records.load_record("exampel")


def test_save_writes_the_script_and_settings_first(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "record_path", lambda name: tmp_path / f"{name}.json")
    path = records.save_record("x", {"runs": [0.5]}, script="scripts/record_x.py", settings={"steps": 9})
    text = path.read_text()
    assert text.index('"script"') < text.index('"settings"') < text.index('"runs"')
