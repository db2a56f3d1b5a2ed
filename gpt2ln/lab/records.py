"""Records: results of runs too long for the book build, committed beside the package.

A chapter runs a small experiment live and renders the longer one from a record, a JSON file
in ``gpt2ln/assets/records/`` written by a script in the repository (``scripts/record_*.py``).
The record says which script made it and with what settings, so anyone can rebuild it; the
chapter checks that its live run points the same way.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

RECORDS = ("assets", "records")


def record_path(name: str) -> Path:
    """Where the record ``name`` (``"ch11_variants"``, no suffix) lives in the source tree."""
    return Path(__file__).resolve().parents[1].joinpath(*RECORDS, f"{name}.json")


def load_record(name: str) -> dict[str, Any]:
    """The record ``name`` as a dict, from the installed package (works from a wheel, in Colab)."""
    resource = resources.files("gpt2ln").joinpath(*RECORDS, f"{name}.json")
    if not resource.is_file():
        available = sorted(p.name[:-5] for p in resources.files("gpt2ln").joinpath(*RECORDS).iterdir()
                           if p.name.endswith(".json"))
        raise FileNotFoundError(f"no record {name!r} in gpt2ln/assets/records/; expected one of {available}")
    return json.loads(resource.read_text(encoding="utf-8"))


def save_record(name: str, data: dict[str, Any], *, script: str, settings: dict[str, Any]) -> Path:
    """Write ``data`` as the record ``name``, with the ``script`` that made it and its ``settings``."""
    path = record_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"script": script, "settings": settings, **data}
    path.write_text(json.dumps(body, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path
