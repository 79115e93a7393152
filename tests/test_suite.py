"""The suite's own machinery: `make test` runs pytest-xdist with --dist loadgroup, and tests
that share a fixture or need the machine to themselves are grouped with xdist_group."""

import os

import pytest

pytestmark = pytest.mark.xdist_group("suite")


def test_xdist_groups_reach_the_scheduler(request):
    # With a pytest that xdist does not know how to rename, the group suffix never reaches the
    # scheduler and every group is spread over the workers (see the pin in pyproject.toml).
    if os.environ.get("PYTEST_XDIST_WORKER") and request.config.getvalue("dist") == "loadgroup":
        assert request.node.nodeid.endswith("@suite"), request.node.nodeid


# The tiers: a test file's module-level pytestmark names at most one of these; unmarked files
# are `make test`'s. The Makefile selects each tier by its marker.
TIERS = {"slow": "make check", "sweep": "make sweeps", "tutorial": "make tutorials"}


def _tier_marks(path) -> tuple[set[str], list[str]]:
    """The tier markers of a test file's module-level ``pytestmark``, and the tests or classes
    that carry a tier marker of their own (none may: a file is in one tier)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    module, own = set(), []

    def marks(node) -> set[str]:
        return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                and n.attr in TIERS and isinstance(n.value, ast.Attribute)
                and n.value.attr == "mark"}

    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module |= marks(node.value)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if any(marks(d) for d in node.decorator_list):
                own.append(node.name)
    return module, own


def test_every_test_file_is_in_exactly_one_tier():
    from pathlib import Path

    root = Path(__file__).resolve().parent
    files = sorted(root.rglob("test_*.py"))
    tiers = {}
    for path in files:
        module, own = _tier_marks(path)
        rel = path.relative_to(root).as_posix()
        assert len(module) <= 1, f"{rel} is in several tiers: {sorted(module)}"
        assert not own, f"{rel}: tests with a tier of their own ({own}); move them to a file " \
                        "of that tier"
        tiers[rel] = next(iter(module), "test")
    counts = {t: sum(v == t for v in tiers.values()) for t in ("test", *TIERS)}
    assert all(counts.values()), counts                 # every tier holds files
    makefile = (root.parent / "Makefile").read_text(encoding="utf-8")
    assert '-m "not slow and not sweep and not tutorial"' in makefile
    for marker in TIERS:
        assert f"-m {marker}" in makefile, marker


def test_a_file_with_two_tiers_is_caught(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text("import pytest\npytestmark = [pytest.mark.slow, pytest.mark.sweep]\n"
                       "@pytest.mark.tutorial\ndef test_x():\n    pass\n")
    module, own = _tier_marks(planted)
    assert module == {"slow", "sweep"} and own == ["test_x"]
