"""The repository says what others may do with it: the code's license and the text's, the same
in LICENSE, pyproject.toml, CITATION.cff, the README and the site's footer; quoted code keeps its own."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_license_file_covers_code_and_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "CC BY 4.0" in text
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()


def test_citation_matches_the_project():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    assert cff["repository-code"] == config["repository"]["url"]
    assert cff["title"].startswith("gpt2ln")


def test_site_footer_and_readme_name_the_licenses():
    footer = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["extra_footer"]
    readme = (ROOT / "README.md").read_text()
    for where in (footer, readme):
        assert "CC BY 4.0" in where and "MIT" in where and "Apache 2.0" in where


def test_every_quoted_project_keeps_its_license():
    quoted = [p for p in (ROOT / "book" / "quotes").iterdir() if p.is_dir()]
    assert {p.name for p in quoted} >= {"openai-gpt-2", "huggingface-transformers", "bzhangGo-rmsnorm"}
    for project in quoted:
        assert (project / "LICENSE").is_file(), project.name
    assert "Apache License" in (ROOT / "book/quotes/huggingface-transformers/LICENSE").read_text()
