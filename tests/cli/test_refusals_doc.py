"""docs/refusals.md stays true: each excerpt is printed by the code and expected by a test."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _excerpts():
    rows = [line for line in (ROOT / "docs" / "refusals.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| command") and "---" not in line]
    assert len(rows) >= 30
    for row in rows:
        for piece in re.findall(r"`([^`]+)`", row.rsplit("|", 2)[-2]):
            yield piece


def _norm(text):
    return re.sub(r"\s+", " ", text)


def test_every_excerpt_is_printed_and_tested():
    src = _norm(" ".join(p.read_text() for p in (ROOT / "src").rglob("*.py")))
    src = src.replace('f"', '"').replace('" "', "").replace("' '", "")   # joined literals
    tests = _norm(" ".join(p.read_text() for p in (ROOT / "tests").rglob("*.py")
                           if p.name != "test_refusals_doc.py"))
    missing_src, missing_tests = [], []
    for piece in _excerpts():
        probe = piece.split(" N")[0]
        # Rendered numbers and dates come from the input: the code holds the words around them.
        runs = [r.strip() for r in re.split(r"\S*\d\S*", probe) if r.strip()]
        longest = max(runs, key=len) if runs else probe
        if longest not in src and longest.replace("'", "") not in src:
            missing_src.append(piece)
        words = probe.split()
        if not any(" ".join(words[i:i + 3]) in tests for i in range(max(1, len(words) - 2))):
            missing_tests.append(piece)
    assert not missing_src, f"not in any message of the code: {missing_src}"
    assert not missing_tests, f"no test expects: {missing_tests}"
