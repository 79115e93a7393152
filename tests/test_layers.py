"""The package's layering: the library (core, nn, inspect, models) imports neither the command
line (cli) nor the figures (plots); there are no import cycles; importing any module changes
no global state (matplotlib's backend, the environment)."""

import ast
import subprocess
import sys
from pathlib import Path

import attnlab

ROOT = Path(attnlab.__file__).parent
LIBRARY = ("core", "nn", "inspect", "models", "distributed", "diagnose")
ABOVE = ("cli", "plots")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every attnlab module ``path`` imports, at module level or inside a function."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m == "attnlab" or m.startswith("attnlab.")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: {m for m in _imports(p) if m in modules and m != name}
            for name, p in modules.items()}


def test_library_never_imports_cli_or_plots():
    bad = [(mod, dep) for mod, deps in _graph().items()
           if mod.split(".")[1:2] and mod.split(".")[1] in LIBRARY
           for dep in deps if dep.split(".")[1:2] and dep.split(".")[1] in ABOVE]
    assert not bad, f"library modules importing cli/ or plots/: {bad}"


def test_only_plots_imports_matplotlib():
    users = []
    for p in ROOT.rglob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "matplotlib" for n in names):
                users.append(_module_name(p))
    assert users and all(u.startswith("attnlab.plots") for u in users), sorted(set(users))


def test_import_graph_has_no_cycles():
    # Submodule imports of a package count as edges from the importer only: "a imports a.b"
    # is how packages expose their parts, not a cycle.
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if dep.startswith(node + "."):
                continue
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                parents = [c for c in cycle if any(o.startswith(c + ".") for o in cycle)]
                if not parents:
                    raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_importing_every_module_changes_no_global_state():
    # In a fresh interpreter: the user's matplotlib backend and environment stay as they were.
    # The third-party libraries are imported first: scikit-learn and statsmodels set
    # KMP_DUPLICATE_LIB_OK / KMP_INIT_AT_FORK on import, which is theirs, not attnlab's.
    code = """
import os, importlib, pkgutil, matplotlib
matplotlib.use("svg")
import torch, sklearn, statsmodels.api, transformers, pandas, networkx, scipy
env = dict(os.environ)
import attnlab
names = [m.name for m in pkgutil.walk_packages(attnlab.__path__, "attnlab.")
         if not m.name.endswith("__main__") and m.name != "attnlab.plotting"]
for name in names:
    importlib.import_module(name)
assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
changed = {k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k)}
assert not changed, changed
print(len(names))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) > 40


def test_figures_leave_the_matplotlib_backend_alone(tmp_path):
    import matplotlib

    from attnlab.plots import heatmap

    before = matplotlib.get_backend()
    heatmap([[0.2, 0.8], [1.0, 0.0]], tmp_path / "m.png", title="t")
    assert matplotlib.get_backend() == before
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
