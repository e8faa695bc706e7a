"""The documentation's links: every relative link of README.md, CHANGELOG.md,
ARCHITECTURE.md and docs/*.md resolves (its #anchor too). The commands of their shell
blocks are checked by test_doc_commands.py.
"""

import pathlib
import re


REPO = pathlib.Path(__file__).resolve().parent.parent.parent
PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "ARCHITECTURE.md"]
    + list((REPO / "docs").glob("*.md"))
)
# Pages that other work adds to docs/ and that the index already links.
EXPECTED_LATER = {
    "padding.md",
    "robustness.md",
    "paper_experiments.md",
    "own_task.md",
}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())  # "_" stays, as on GitHub.
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {github_anchor(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def links(page: pathlib.Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for link in links(page):
            if re.match(r"[a-z]+:", link):
                continue  # https:, mailto:
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                if target.name in EXPECTED_LATER and target.parent == REPO / "docs":
                    continue
                broken.append(f"{page.name}: {link}")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{page.name}: {link} (no such heading)")
    assert not broken, broken


def test_pages_expected_later_are_linked_from_the_index():
    """EXPECTED_LATER may only excuse pages that the index links."""
    index = (REPO / "docs" / "index.md").read_text()
    for name in EXPECTED_LATER:
        assert f"]({name})" in index


def test_table_rows_are_inside_their_tables():
    """A row after a blank line without a header, or text glued to a table, renders
    wrong: the row as text, the text as a row."""
    misplaced = []
    for page in PAGES + [REPO / "sample_data" / "README.md"]:
        lines = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        lines = lines.splitlines() + [""]
        for index, line in enumerate(lines[1:-1], 1):
            before, after = lines[index - 1], lines[index + 1]
            if line.startswith("|"):
                starts = not before.strip()
                if before.strip() and not before.startswith("|"):
                    misplaced.append(
                        f"{page.relative_to(REPO)}: {line[:60]} (text right before it)"
                    )
                elif starts and not re.match(r"\|[ :|-]+\|?\s*$", after):
                    misplaced.append(
                        f"{page.relative_to(REPO)}: {line[:60]} (a row without a header)"
                    )
            elif line.strip() and before.startswith("|"):
                misplaced.append(f"{page.relative_to(REPO)}: {line[:60]} (text glued to a table)")
    assert not misplaced, misplaced
