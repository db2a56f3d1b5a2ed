"""The GitHub workflow runs the README's two commands, tests every push and pull request, and
publishes the book to GitHub Pages from main only. (scripts/test.sh also runs actionlint on it.)"""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def workflow() -> dict:
    flow = yaml.safe_load(WORKFLOW.read_text())
    flow["on"] = flow.pop(True, flow.get("on"))  # YAML 1.1 reads the key `on` as True
    return flow


def readme_commands() -> list[str]:
    block = re.search(r"## Two commands\n.*?```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md should keep its 'Two commands' block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_workflow_steps_run_exactly_the_readmes_two_commands():
    runs = [step["run"].strip() for job in workflow()["jobs"].values()
            for step in job["steps"] if "run" in step]
    assert sorted(runs) == sorted(readme_commands()) == ["bash scripts/build_book.sh", "bash scripts/test.sh"]


def test_tests_run_on_every_push_and_pull_request():
    flow = workflow()
    assert "push" in flow["on"] and "pull_request" in flow["on"]
    assert flow["on"]["push"] is None and flow["on"]["pull_request"] is None  # no branch filter
    test = flow["jobs"]["test"]
    assert "if" not in test and any(s.get("run") == "bash scripts/test.sh" for s in test["steps"])


def test_book_is_built_and_deployed_from_main_pushes_only_after_the_tests_pass():
    jobs = workflow()["jobs"]
    assert jobs["build"]["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    uses = [s.get("uses", "").split("@")[0] for s in jobs["build"]["steps"]]
    assert uses[-2:] == ["actions/configure-pages", "actions/upload-pages-artifact"]
    assert jobs["build"]["steps"][-1]["with"]["path"] == "_build/html"
    deploy = jobs["deploy"]
    assert sorted(deploy["needs"]) == ["build", "test"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]
    assert deploy["concurrency"]["cancel-in-progress"] is False  # never cut a deployment short


def test_workflow_takes_torch_from_pytorchs_cpu_index_not_pypis_cuda_build():
    env = workflow()["env"]
    assert env["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert env["TORCH_SPEC"].endswith("+cpu")
    assert workflow()["permissions"] == {"contents": "read"}
