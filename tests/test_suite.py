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
