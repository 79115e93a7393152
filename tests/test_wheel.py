"""An install outside a clone: the wheel `python -m build` (here `pip wheel`, the same
setuptools build without downloading a build environment) makes carries everything attnlab
needs at run time, and works from a fresh virtual environment: `attnlab --help`, a census of
the shipped kjv model, and a show() report. The fresh environment takes the dependencies
(torch, transformers, ...) from the test's own, by a path file, so that nothing is
downloaded; attnlab itself comes from the wheel only."""

import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DATA = ("attnlab/inspect/report/report.js", "attnlab/inspect/report/census.js",
        "attnlab/inspect/report/report.css", "attnlab/inspect/report/page.html",
        "attnlab/zoo/weights/kjv.safetensors", "attnlab/zoo/weights/kjv.json",
        "attnlab/zoo/weights/dates.safetensors", "attnlab/zoo/weights/induction.safetensors",
        "attnlab/models/forecast/paper/templates/en.tex",
        "attnlab/models/forecast/paper/templates/zh.tex")


def _run(args, cwd, timeout=300):
    res = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{args[:3]}: {res.stdout[-2000:]}{res.stderr[-2000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(out), str(ROOT)], ROOT)
    (path,) = out.glob("attnlab-*.whl")
    return path


def test_the_wheel_carries_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [d for d in DATA if d not in names]
    assert not missing, missing
    # every non-Python file of the package in the source tree is in the wheel
    tracked = [str(p.relative_to(ROOT / "src")) for p in (ROOT / "src/attnlab").rglob("*")
               if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in
               p.parts and ".egg-info" not in str(p)]
    assert not [t for t in tracked if t not in names], tracked


@pytest.mark.xdist_group("wheel")
def test_the_wheel_works_from_a_fresh_environment(wheel, tmp_path):
    env = tmp_path / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], tmp_path)
    py = env / "bin" / "python"
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                tmp_path).strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
          str(wheel)], tmp_path)
    assert "attention from the formula" in _run([str(env / "bin" / "attnlab"), "--help"],
                                                tmp_path)
    script = textwrap.dedent("""
        import attnlab, sys
        from pathlib import Path
        assert Path(attnlab.__file__).is_relative_to(sys.prefix), attnlab.__file__
        from attnlab.inspect import census, show
        from attnlab.inspect.show import load_kjv
        model, tok = load_kjv()
        text = "In the beginning God created the heaven and the earth. " * 6
        c = census(model, tok, text)
        assert c.layers * c.heads == 32 and c.length == len(text)
        c.save("census.html")
        ins = show(model, tok, text[:120])
        ins.save("report.html")
        for f in ("census.html", "report.html"):
            page = Path(f).read_text()
            assert len(page) > 10_000 and "<script" in page, f
        print("ok", attnlab.__file__)
    """)
    out = _run([str(py), "-c", script], tmp_path)
    assert out.startswith("ok ") and str(env) in out
