"""The label table across the two routes at full length (slow tier: make check): the kjv model on
1,023 and 1,025 bytes, every map against the census."""

import pytest

from attnlab.inspect import census, show
from attnlab.inspect.show import load_kjv
from attnlab.zoo import kjv
from tests.inspect.test_labels import (
    SHARED,  # noqa: F401  (fixtures and helpers)
)

pytestmark = pytest.mark.slow


@pytest.mark.xdist_group("kjv_1024")
def test_labels_do_not_switch_with_the_route_at_1024_tokens():
    """kjv on 1,023 bytes (show(): every map) and 1,025 bytes (show(): the census) of one
    text, and the census of the 1,023: one label per head, and the numbers of the two routes
    on the same 1,023 bytes within float32 rounding."""
    model, tok = load_kjv()
    text = kjv.corpus("heldout")[:1025]
    maps = show(model, tok, text[:1023])
    long = show(model, tok, text)
    same = census(model, tok, text[:1023])
    assert type(maps).__name__ == "Inspection" and type(long).__name__ == "Census"
    assert maps.taxonomy.labels == same.labels == long.labels
    assert {"previous token", "local"} <= {x for row in same.labels for x in row}
    for name in SHARED:
        a, b = getattr(maps.metrics, name).double(), same.summary[name].double()
        assert float((a - b).abs().max()) <= 1e-6 * max(float(a.abs().max()), 1.0), name
    both = maps.table()
    assert list(both.columns[:3]) == ["layer", "head", "label"] and len(both) == 32
    diff = same.compare(long, names=("1023", "1025"))
    assert not diff["changed"].any()
    assert float(diff["delta_entropy"].abs().max()) < 0.05     # two more bytes of 1,025
