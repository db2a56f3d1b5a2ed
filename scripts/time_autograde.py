"""Time nbgrader's autograding of every chapter: the numbers book/instructors.md states.

For each chapter with exercises, builds the nbgrader course (`gpt2ln.classroom.assign --nbgrader`),
releases the chapter, submits its instructor version (every exercise solved) as one student,
and times `nbgrader autograde` on it, offline (HF_HUB_OFFLINE=1): the wall-clock seconds and
the CPU seconds of nbgrader and of everything it ran (the kernel, and the worker processes of
the training chapters). CPU seconds depend little on what else the machine runs; wall-clock
seconds depend on it a lot, so the record keeps the load average beside them.
Needs nbgrader (pip install -r requirements-nbgrader.txt).
Usage: python scripts/time_autograde.py [--out book/records/autograde.json] [chapter ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpt2ln.classroom.nbgrader_course import write_course  # noqa: E402


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _nbgrader(course: Path, env: dict, *args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise SystemExit(f"nbgrader {' '.join(args)} failed:\n{result.stderr[-3000:]}")


def time_chapters(chapters: list[str], course: Path) -> dict[str, dict[str, float]]:
    """{chapter: {"wall_s", "cpu_s", "load1"}} for one solved submission of each chapter."""
    paths = [ROOT / "notebooks" / f"{c}.ipynb" for c in chapters] if chapters else [ROOT / "notebooks"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    times = {}
    for _, source, _ in write_course(paths, course):
        chapter = source.stem
        _nbgrader(course, env, "generate_assignment", chapter)
        submitted = course / "submitted" / "solved" / chapter
        submitted.mkdir(parents=True)
        nbformat.write(nbformat.read(source, as_version=4), submitted / source.name)
        cpu0, wall0 = _children_cpu_s(), time.perf_counter()
        _nbgrader(course, env, "autograde", chapter)
        times[chapter] = {
            "wall_s": round(time.perf_counter() - wall0, 1),
            "cpu_s": round(_children_cpu_s() - cpu0, 1),
            "load1": round(os.getloadavg()[0], 1),
        }
        print(chapter, times[chapter], flush=True)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="notebook names without .ipynb (default: all)")
    parser.add_argument("--out", type=Path, help="write the record (JSON) here")
    args = parser.parse_args(argv)
    import nbgrader
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        times = time_chapters(args.chapters, Path(tmp) / "course")
    record = {
        "what": "nbgrader autograde of one solved submission per chapter, offline (HF_HUB_OFFLINE=1)",
        "nbgrader": nbgrader.__version__,
        "torch": torch.__version__,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "chapters": times,
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
