"""The report of `attnlab inspect --figures` on a hostile text, built once per run for the
end-to-end report tests (test_report_browser.py)."""

import pytest

from attnlab.cli import main

EVIL = 'He said <script>alert("x")</script> & left.'


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    # over 5 s, once per run: the full report with every figure, shared by the module's tests
    out = tmp_path_factory.mktemp("inspect")
    assert main(["inspect", EVIL, "--pair", "Tokenization <b>bold</b>.", "--out", str(out),
                 "--figures", "--target", "similarity"]) == 0
    return out
