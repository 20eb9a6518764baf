"""fathom.Index (fathom_index, what the decoder and eval scan) against the
primitives it is built from, and its refusals."""
import numpy as np
import pytest

import fathom


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    keys = (rng.standard_normal((700, 64)) * rng.uniform(0.1, 3, 64)).astype(np.float32)
    return keys, rng.standard_normal((3, 64)).astype(np.float32)


def test_fathom_scores_are_store_variance_plan_scan(data):
    """Uncalibrated fathom:B = the store's running variance, the plan at B
    bits for the group, the scan at those depths (App. D), bit for bit."""
    keys, q = data
    ix = fathom.Index("fathom:48,sparq:16,landmark", 64)
    ix.append(keys[:500])
    ix.append(keys[500:])
    assert (len(ix), ix.dim) == (700, 64)
    store = fathom.Store.from_keys(keys)
    depths = fathom.plan(store.variance(), q, 48)
    want, want_bytes = store.scan(q, depths, 650)
    got, bits, nbytes, got_depths = ix.scores("fathom:48", q, 650, depths=True)
    np.testing.assert_array_equal(got_depths, depths)
    np.testing.assert_array_equal(got, want)
    assert nbytes == want_bytes and bits == fathom.depth_bits(depths) and bits <= 48 + 64 / 4
    # another budget for the same method (a per-layer budget)
    got16, bits16, _ = ix.scores("fathom:48", q, budget=16)
    np.testing.assert_array_equal(got16, store.scan(q, fathom.plan(store.variance(), q, 16))[0])
    assert bits16 < bits
    # sparq:16: the 16 channels of largest sum_h |q_hj| at full depth
    top = np.argsort(-np.abs(q).sum(axis=0), kind="stable")[:16]
    sparq_depths = np.zeros(64, np.uint8)
    sparq_depths[top] = 4
    np.testing.assert_array_equal(ix.scores("sparq:16", q)[0], store.scan(q, sparq_depths)[0])
    lm = fathom.Landmarks(64)
    lm.append(keys)
    np.testing.assert_array_equal(ix.scores("landmark", q)[0], lm.scan(q)[0])
    ix.clear()
    assert len(ix) == 0


def test_index_refusals(data):
    keys, q = data
    with pytest.raises(fathom.StateError, match="calibration"):
        fathom.Index("fathom:48,ds:8", 64).append(keys)
    ix = fathom.Index("fathom:48", 64)
    ix.append(keys)
    with pytest.raises(fathom.InvalidArgumentError, match="not in the index"):
        fathom.Index("sparq:16", 64).scores("fathom-klt:48", q, 0)
    with pytest.raises(fathom.InvalidArgumentError, match="keys asked"):
        ix.scores("fathom:48", q, 701)
    with pytest.raises(fathom.InvalidArgumentError):
        fathom.method_check("fathom:999", 64)
    assert fathom.method_needs("ds:8") & fathom.core.NEEDS_CALIB and fathom.method_needs("dense") == 0
