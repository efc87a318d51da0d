"""Every citation of a docs page's section names a section that page has.

Code, benchmarks and docs cite measurements and reasons as `docs/<page>.md, "<section>"`
(issue 48: code says what and how, the docs say why and how fast). When a section moves or is
renamed, the citation must follow it. A section is a heading, a bold lead-in (`**...**`) or the
first words of a line; a citation may name its first words only.
"""

import os
import re
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE_SUFFIXES = (".py", ".cc", ".h", ".md")
SKIPPED_FOLDERS = {"build", "dist", "node_modules", "__pycache__"}
# `docs/results.md, "The machine's limit"` and `docs/results.md ("The machine's limit")`; the
# text is read with its line breaks and comment markers taken out.
CITATION = re.compile(r'docs/([\w/.-]+\.md),? \(?"([^"]+)"')
LINE_BREAK = re.compile(r"\s*\n\s*(?:#|//|\*)?\s*")


def source_files():
    """The repository's own source and docs files: hidden folders (git, CI's virtual
    environment), build outputs and this file are left out."""
    this_file = Path(__file__).resolve()
    for folder, subfolders, names in os.walk(REPO_ROOT):
        subfolders[:] = [name for name in subfolders if not (
            name.startswith((".", "bazel-")) or name in SKIPPED_FOLDERS
            or name.endswith(".egg-info"))]
        for name in names:
            path = Path(folder) / name
            if path.suffix in SOURCE_SUFFIXES and path != this_file:
                yield path


def citations(text):
    """[(page, section)] cited in `text`."""
    return CITATION.findall(LINE_BREAK.sub(" ", text))


def section_starts(text):
    """What a citation of this page may start with: each line's text from its start to its
    paragraph's end (heading and list markers and bold marks taken out, whitespace collapsed),
    and every bold span."""
    lines = text.split("\n")
    starts = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        paragraph = []
        for following in lines[index:]:
            if not following.strip():
                break
            paragraph.append(following.strip())
        starts.append(" ".join(paragraph).lstrip("#-* ").replace("**", ""))
    collapsed = re.sub(r"\s+", " ", text)
    starts.extend(re.findall(r"\*\*(.+?)\*\*", collapsed))
    return starts


def unresolved(sources, read_page):
    """["name: page, section"] for each citation no section of its page starts with.

    Args:
        sources: (name, text) of each file read.
        read_page: a page's name (as cited after `docs/`) -> its text, or None where it has none.
    """
    missing, pages = [], {}
    for name, text in sources:
        for page, section in citations(text):
            if page not in pages:
                text = read_page(page)
                pages[page] = None if text is None else section_starts(text)
            starts, cited = pages[page], section.removesuffix(" ...")
            if starts is None or not any(start.startswith(cited) for start in starts):
                missing.append(f"{name}: docs/{page}, {section!r}")
    return missing


def read_docs_page(page):
    path = REPO_ROOT / "docs" / page
    return path.read_text(encoding="utf-8") if path.is_file() else None


class DocsCitationsTest(unittest.TestCase):
    def test_every_cited_section_exists(self):
        files = list(source_files())
        self.assertGreater(len([f for f in files if f.suffix == ".py"]), 100)  # the tree is read
        sources = [(str(f.relative_to(REPO_ROOT)), f.read_text(encoding="utf-8")) for f in files]
        self.assertGreater(sum(len(citations(text)) for _, text in sources), 20)
        self.assertEqual(unresolved(sources, read_docs_page), [])

    def test_a_moved_section_is_reported(self):
        # The check itself: a citation whose section is gone, one split over comment lines,
        # one of a page that does not exist, beside ones that resolve.
        page = "# Results\n\n## The machine's limit on a CPU\n\n- **How the tests stay cheap.** x\n"
        text = ('# (docs/results.md, "The machine\'s limit") and docs/results.md, "How the tests\n'
                '# stay cheap"; docs/results.md, "The medium\n# start"; docs/gone.md, "Anything".')
        found = unresolved([("psmm_tf/cited.py", text)],
                           lambda name: page if name == "results.md" else None)
        self.assertEqual(found, ["psmm_tf/cited.py: docs/results.md, 'The medium start'",
                                 "psmm_tf/cited.py: docs/gone.md, 'Anything'"])


if __name__ == "__main__":
    unittest.main()
