"""README.md as a user's guide: short enough to read through, its contents listing its sections, and its test command
the one CI runs (the commands the README shows run in the e2e tests: test_readme.py, test_pipeline.py, test_grid.py)."""

from __future__ import annotations

import re
import subprocess

from tests.helpers import REPO, readme_block

README = (REPO / "README.md").read_text()


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_readme_is_at_most_300_lines() -> None:
    assert len(README.splitlines()) <= 300


def test_its_contents_link_every_section_in_order() -> None:
    headings = re.findall(r"^## (.+)$", README, re.M)
    contents = README.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", contents)
    assert headings[0] == "Contents" and len(headings) > 10
    assert links == [(h.replace("`", ""), anchor(h)) for h in headings[1:]]
    assert anchor("Weights & Biases") == "weights--biases" and anchor("DVC's views") == "dvcs-views"


def test_its_test_command_is_the_one_ci_runs() -> None:
    """Each step of the README's test command is a line of .ci/run, in order (CI's install quiet)."""
    (command,) = readme_block("Quick start", 2)
    ci = [line for line in (REPO / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    steps = [s.replace("pip install -e", "pip install -q -e") for s in command.split(" && ")]
    found = [next(i for i, line in enumerate(ci) if line.startswith(step)) for step in steps]
    assert len(steps) == 4 and found == sorted(found)


def test_the_dag_it_links_is_what_dvc_dag_draws() -> None:
    """docs/dag.md, the README's readable view of the stages, is `dvc dag --md` at the committed study."""
    done = subprocess.run(["dvc", "dag", "--md"], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert (REPO / "docs/dag.md").read_text().split("```mermaid", 1)[1] == done.stdout.split("```mermaid", 1)[1], (
        "docs/dag.md is not this study's `dvc dag --md`: redraw it as docs/design.md says (a new encoder's stages)")
    assert "docs/dag.md" in readme_block("DVC's views", 0)[-1]
