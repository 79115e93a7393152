"""The package's layering: the folder order is the import order.

One ordered list (docs/architecture.md): each layer imports only from layers to its left, and
layers that share a place in the list do not import each other. ``_files`` (atomic writes) is a
leaf below them all, and so is ``_threads`` (the threads of long calls); the package's public
surface (``attnlab/__init__.py``, ``attnlab.masks``) sits with the core. Besides: no import
cycles, matplotlib only in ``plots/``, and importing any module changes no global state
(matplotlib's backend, the environment, another layer's registry)."""

import ast
import subprocess
import sys
from pathlib import Path

import attnlab

ROOT = Path(attnlab.__file__).parent
LAYERS = (("core",), ("nn", "testing"), ("integrations",), ("distributed",), ("zoo",),
          ("inspect",), ("diagnose", "models", "explain"), ("bench",), ("plots",), ("cli",))
# Top-level modules that are not a layer of their own: where they sit in the order.
PLACED = {"_files": -1, "_threads": -1, "_progress": -1, "": 0.5, "masks": 0.5}
# Modules placed above their package's layer, with the reason.
RAISED = {"attnlab.testing.exercises.heads": (5.5, "chapter 15's checks record and ablate the "
                                              "heads of a real model (inspect)"),
          "attnlab.testing.exercises.matters": (5.5, "chapter 16's checks compare with the "
                                                "importance of a real model (inspect)")}


def rank(module: str) -> float:
    """The position in LAYERS of ``attnlab.<layer>...`` (-1 for the leaf ``_files``)."""
    if module in RAISED:
        return RAISED[module][0]
    part = module.split(".")[1] if "." in module else ""
    if part in PLACED:
        return PLACED[part]
    for i, layer in enumerate(LAYERS):
        if part in layer:
            return i
    raise AssertionError(f"{module} is in no layer of {LAYERS}; give it a place in the list")


def layer_of(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every (importer, imported) pair that goes up the list or sideways within one place."""
    bad = []
    for mod, deps in graph.items():
        for dep in deps:
            if layer_of(dep) == layer_of(mod):
                continue
            if rank(dep) >= rank(mod):
                bad.append((mod, dep))
    return sorted(bad)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, typing: bool = False) -> set[str]:
    """Every attnlab module ``path`` imports at run time, at module level or in a function;
    with ``typing``, also those imported only for annotations (``if TYPE_CHECKING:``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(n) for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body for n in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:  # annotations only; not at run time
            continue
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


def _graph(typing: bool = False) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: {m for m in _imports(p, typing) if m in modules and m != name}
            for name, p in modules.items()}


def test_every_module_has_a_layer():
    for name in _graph():
        rank(name)


def test_the_folder_order_is_the_import_order():
    bad = violations(_graph())
    assert not bad, "imports against the order " + " < ".join(
        "{" + ", ".join(layer) + "}" for layer in LAYERS) + f": {bad}"


# Inside models/: the wings stand side by side and share only models' common modules; the
# common modules know no wing.
WINGS = ("attnlab.models.forecast", "attnlab.models.tabular", "attnlab.models.graph")
SHARED = ("attnlab.models.training", "attnlab.models.io", "attnlab.models.latex",
          "attnlab.models.datasets")


def _wing(module: str) -> str | None:
    return next((w for w in WINGS if module == w or module.startswith(w + ".")), None)


def test_the_model_wings_import_only_the_shared_modules():
    graph = _graph()
    bad = [(m, d) for m, deps in graph.items() if _wing(m) for d in deps
           if d.startswith("attnlab.models") and _wing(d) not in (None, _wing(m))]
    bad += [(m, d) for m in SHARED for d in graph.get(m, ()) if _wing(d)]
    assert not bad, f"a wing of models/ imports another, or a shared module imports a wing: {bad}"
    for wing in WINGS:                                   # each wing exists and is a package
        assert (ROOT.parent / wing.replace(".", "/") / "__init__.py").is_file(), wing


def test_a_planted_upward_import_is_caught():
    graph = {k: set(v) for k, v in _graph().items()}
    graph["attnlab.core.api"].add("attnlab.inspect.capture")          # core -> inspect
    graph["attnlab.zoo.dates"].add("attnlab.inspect.capture")         # zoo -> inspect
    graph["attnlab.nn.multihead"].add("attnlab.testing.compare")      # sideways
    assert violations(graph) == sorted([("attnlab.core.api", "attnlab.inspect.capture"),
                                        ("attnlab.nn.multihead", "attnlab.testing.compare"),
                                        ("attnlab.zoo.dates", "attnlab.inspect.capture")])


def test_importing_a_layer_loads_nothing_above_it():
    # At run time too: importing attnlab (core and its public surface) loads no verification,
    # no inspection; importing zoo loads nothing of inspect.
    code = """
import sys, attnlab, attnlab.masks
loaded = sorted({m.split('.')[1] for m in sys.modules if m.startswith('attnlab.')})
assert loaded == ['core', 'masks'], loaded
import attnlab.zoo
assert not any(m.startswith('attnlab.inspect') for m in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


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
    # is how packages expose their parts, not a cycle. Imports for annotations count too: a
    # circle of types is a circle a reader follows.
    graph = _graph(typing=True)
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
    # over 5 s: a fresh interpreter importing every module; the only global-state check
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
         if not m.name.endswith("__main__")]
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

    from attnlab.plots import save_heatmap

    before = matplotlib.get_backend()
    save_heatmap([[0.2, 0.8], [1.0, 0.0]], tmp_path / "m.png", title="t")
    assert matplotlib.get_backend() == before
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"


def test_tests_mirror_the_package():
    tests = Path(__file__).parent
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for d in tests.iterdir():
        if d.is_dir() and (d / "__init__.py").exists():
            assert d.name in packages, f"tests/{d.name} has no src/attnlab/{d.name} to mirror"


def test_every_public_definition_says_what_it_does():
    # Public: not underscored, in a module not underscored. The backend entry points say
    # how they differ from the reference (checked by name below).
    missing = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).parts
        if any(p.startswith("_") and p not in ("__init__.py", "__main__.py") for p in rel):
            continue

        def visit(nodes, prefix, path=path):
            for n in nodes:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                        and not n.name.startswith("_"):
                    if not ast.get_docstring(n):
                        missing.append(f"{path.relative_to(ROOT)}:{n.lineno} {prefix}{n.name}")
                    if isinstance(n, ast.ClassDef):
                        visit(n.body, f"{prefix}{n.name}.")

        visit(ast.parse(path.read_text(encoding="utf-8")).body, "")
    assert not missing, f"{len(missing)} public definitions without a docstring: {missing[:20]}"
    import inspect as _inspect

    from attnlab.core.registry import list_backends
    for name, backend in list_backends().items():
        doc = _inspect.getdoc(backend.fn) or ""
        assert "reference" in doc or name == "reference", (name, doc[:80])


# A head's entropy and its sink mass are defined once, in core/stats.py (attention_stats and
# reference_stats); every other module reduces those rows. These patterns find a second
# definition (p log p, a log-weight product, the weight column of key 0 summed).
STAT_LOOPS = (r"xlogy\(", r"\*\s*torch\.log2?\(", r"\[\.\.\., *0\]\.(sum|mean)\(",
              r"\.log\(\)\)?\.sum\(")
STAT_LOOPS_ALLOWED = {
    "core/stats.py": "the definitions",
    "core/engine/eager/stats.py": "the eager tile passes of core/stats.py's attention_stats",
    "testing/exercises/heads.py": "exercise 15.1's expected values: the dense formula a "
                                  "learner's one-pass answer is checked against",
    "inspect/metrics.py": "the Jensen-Shannon divergence between two heads' rows (entropies of "
                          "their mixture), not a head's own entropy",
}


def _stat_loops(text: str) -> list[str]:
    import re

    return [line.strip() for line in text.splitlines()
            if any(re.search(p, line) for p in STAT_LOOPS)]


def test_entropy_and_sink_mass_are_computed_only_in_core_stats():
    found = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel in STAT_LOOPS_ALLOWED:
            continue
        hits = _stat_loops(path.read_text(encoding="utf-8"))
        if hits:
            found[rel] = hits
    assert not found, ("entropy or sink mass computed outside core/stats.py (take them from "
                       f"attention_stats / reference_stats): {found}")


def test_a_planted_entropy_loop_is_caught():
    planted = ("ent = -(a * torch.log(a)).sum(-1)\n"
               "h = torch.special.xlogy(p, p).sum(-1)\n"
               "sink = maps[..., 0].mean(-1)\n")
    assert len(_stat_loops(planted)) == 3


def test_seeded_library_calls_leave_the_callers_rng_alone():
    """Functions that seed torch for reproducibility (the zoo's training, explain's additive
    scorer, diagnose's experiments, bench's cells) fork the RNG: the caller's stream goes on
    as if they had not run."""
    import torch

    from attnlab.explain.additive import additive_walk
    from attnlab.explain.walk import random_example, walk

    ex = random_example()
    wt = walk(ex.tokens, ex.q, ex.k, ex.v, inputs=ex)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    additive_walk(wt)
    assert torch.equal(torch.rand(3), expected)
    src = (ROOT / "zoo" / "induction.py").read_text(encoding="utf-8")
    assert "@torch.random.fork_rng(devices=[])" in src


# A private name (a module or a name starting with "_") is its package's own: other packages
# reach it through a public name. The exceptions, each with its reason:
PRIVATE_SHARED = {
    "attnlab._files": "the atomic write every package's outputs go through (a leaf)",
    "attnlab._threads": "the CLI's thread rule, used by the library's long calls (a leaf)",
    "attnlab._progress": "the progress bar of long jobs (a leaf)",
    "attnlab.__version__": "the version stamped into reports",
}


def _private_imports(path: Path, module: str) -> list[tuple[str, str]]:
    """``(imported module, name)`` of every private module or name ``module`` imports from
    another top-level package of attnlab."""
    own = module.split(".")[1] if module.count(".") else ""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("attnlab"):
            continue
        parts = node.module.split(".")
        if (parts[1] if len(parts) > 1 else "") == own:
            continue
        for alias in node.names:
            private = any(p.startswith("_") for p in parts[1:]) or alias.name.startswith("_")
            if not private:
                continue
            if node.module in PRIVATE_SHARED or f"{node.module}.{alias.name}" in PRIVATE_SHARED:
                continue
            out.append((node.module, alias.name))
    return out


def test_no_package_imports_another_packages_private_names():
    bad = {m: found for m, p in ((_module_name(p), p) for p in ROOT.rglob("*.py"))
           if (found := _private_imports(p, m))}
    assert not bad, f"private names imported across packages (give them a public name): {bad}"


def test_a_planted_private_import_is_caught(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from attnlab.core.engine.tiles import _private_helper\n"
                       "from attnlab.nn import _hidden\n"
                       "from attnlab._files import write_text_atomic\n")
    assert _private_imports(planted, "attnlab.inspect.planted") == [
        ("attnlab.core.engine.tiles", "_private_helper"), ("attnlab.nn", "_hidden")]


def test_every_path_in_the_architecture_page_exists():
    """docs/architecture.md's tree of src/attnlab/ names only files and folders that exist (its
    indentation gives each name's folder), so the page cannot keep a moved or deleted module."""
    paths = _architecture_tree()
    assert len(paths) > 100, len(paths)
    assert not (missing := [p for p in paths if not ROOT.joinpath(p).exists()]), missing


def _architecture_tree() -> list[str]:
    """The paths under src/attnlab/ that docs/architecture.md's tree names, in order."""
    page = (ROOT.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    tree = page.split("```\nsrc/attnlab/\n", 1)[1].split("```", 1)[0]
    stack, paths = [], []
    for line in tree.splitlines():
        body = line.lstrip(" ")
        name = body.split(" ", 1)[0]
        if not (name.endswith((".py", ".cpp")) or name.endswith("/")):
            continue                                    # a continued description
        depth = (len(line) - len(body)) // 2 - 1
        if depth < 0 or depth > len(stack):
            continue
        stack[depth:] = [name.rstrip("/")]
        paths.append("/".join(stack))
    return paths


def test_the_architecture_page_names_every_module_of_the_core():
    """Every module of core/ (the tile engine's folders and its C++ source included) is in the
    page's tree, under the folder it is in: a newcomer reads the engine's layout there."""
    named = set(_architecture_tree())
    files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "core").rglob("*")
             if p.suffix in (".py", ".cpp") and p.name != "__init__.py"
             and "__pycache__" not in p.parts]
    assert not (absent := sorted(set(files) - named)), absent


# Inside core/, the arrows point down: the backends and the statistics' face sit above the
# registry and the engine; the engine's eager reference imports nothing of its compiled path.
CORE_FORBIDDEN = {
    "core/engine/": ("attnlab.core.backends", "attnlab.core.registry", "attnlab.core.stats",
                     "attnlab.core.api"),
    "core/engine/eager/": ("attnlab.core.engine.compiled",),
    "core/registry.py": ("attnlab.core.backends", "attnlab.core.api"),
    "core/spec.py": ("attnlab.core.backends", "attnlab.core.engine", "attnlab.core.registry"),
}


def test_no_arrow_back_up_inside_core():
    bad = []
    for path in (ROOT / "core").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        banned = [b for prefix, names in CORE_FORBIDDEN.items() if rel.startswith(prefix)
                  for b in names]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{rel} -> {m}" for m in mods for b in banned
                    if m == b or m.startswith(b + ".")]
    assert not bad, bad
