"""The one atomic write: all or nothing, and the permissions the user's umask gives."""

import os
import stat

import pytest

from attnlab._files import atomic_path, write_text_atomic
from attnlab.models import io


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_files_and_folders_get_the_umask_permissions(tmp_path, umask_027):
    p = write_text_atomic(tmp_path / "a" / "metrics.json", "{}\n")
    assert stat.S_IMODE(p.stat().st_mode) == 0o640          # not mkstemp's 0600
    import torch
    folder = io.write_model(tmp_path / "model", "X", {}, {}, {"w": torch.zeros(2)})
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = write_text_atomic(tmp_path / "report.html", "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old" and sorted(tmp_path.iterdir()) == [target]


def test_a_folder_is_replaced_whole(tmp_path):
    with atomic_path(tmp_path / "model", folder=True) as tmp:
        (tmp / "a").write_text("1")
    with atomic_path(tmp_path / "model", folder=True) as tmp:
        (tmp / "b").write_text("2")
    assert [p.name for p in (tmp_path / "model").iterdir()] == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    with pytest.raises(ValueError, match="is a folder"):
        write_text_atomic(tmp_path / "model", "x")


def test_missing_glyphs_are_one_warning_that_names_the_fix(tmp_path):
    import warnings

    from attnlab.plots import figure
    from attnlab.plots._figure import _fallback_fonts

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with figure(tmp_path / "cjk.png", figsize=(3, 2)) as fig:
            fig.add_subplot().set_title("注意力 attention")
    messages = [str(w.message) for w in caught]
    if len(_fallback_fonts()) > 1:                     # a CJK font is installed: no boxes
        assert not any("glyph" in m for m in messages)
    else:
        assert len(messages) == 1 and "'注'" in messages[0] and "fonts-noto-cjk" in messages[0]
    assert (tmp_path / "cjk.png").is_file()
