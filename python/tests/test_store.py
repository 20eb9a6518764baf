"""Store, scan, select and attend against numpy references written from the
paper's definitions (§3.2, §2), not from the C code."""
import numpy as np
import pytest

import fathom


def quantize_ref(keys):
    """Codes [n, d] and fp16 scales [blocks, d]: a = fp16(max |k|) per 64-token
    block and channel, s = a/8, c = clip(floor(k/s) + 8, 0, 15) in float32."""
    n, d = keys.shape
    codes = np.empty((n, d), np.uint8)
    scales = np.empty(((n + 63) // 64, d), np.float32)
    for b in range(scales.shape[0]):
        blk = keys[b * 64:(b + 1) * 64]
        a = np.abs(blk).max(axis=0).astype(np.float16).astype(np.float32)
        scales[b] = a
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.floor(blk / (a / np.float32(8))) + np.float32(8)
        c = np.where(a > 0, c, 8)
        codes[b * 64:(b + 1) * 64] = np.clip(c, 0, 15)
    return codes, scales


def decode_ref(codes, scales, depths):
    """Each channel at its depth t: (c >> (4-t) + 1/2 - 2^(t-1)) a / 2^(t-1); t = 0 is 0."""
    a = np.repeat(scales, 64, axis=0)[: codes.shape[0]]
    out = np.zeros(codes.shape, np.float32)
    for j, t in enumerate(depths):
        if t:
            half = np.float32(2 ** (t - 1))
            out[:, j] = ((codes[:, j] >> (4 - t)).astype(np.float32) + np.float32(0.5) - half) * (a[:, j] / half)
    return out


@pytest.fixture(scope="module")
def keys():
    rng = np.random.default_rng(7)
    k = rng.standard_normal((1000, 64)).astype(np.float32) * rng.uniform(0.1, 3, 64).astype(np.float32)
    k[:, 5] = 0  # an all-zero channel: scale 0, every code 8
    return k


def test_planes_scales_and_decode(keys):
    n, d = keys.shape
    store = fathom.Store.from_keys(keys, segment_blocks=4)  # 256 tokens a segment: 4 segments
    assert (len(store), store.dim, store.segment_count) == (n, d, 4)
    codes, scales = quantize_ref(keys)
    for seg in range(store.segment_count):
        s = store.segment(seg)
        assert not s.planes.flags.writeable and s.planes.shape == (d, 4, 4)
        assert s.first_token == seg * 256 and s.tokens == min(256, n - seg * 256)
        for b in range(s.blocks):
            block = seg * 4 + b
            rows = codes[block * 64:(block + 1) * 64]
            for p in range(4):
                bits = (rows >> (3 - p)) & 1  # plane p (0 = MSB), bit i = token i
                want = (bits.astype(np.uint64) << np.arange(rows.shape[0], dtype=np.uint64)[:, None]).sum(axis=0)
                np.testing.assert_array_equal(s.planes[:, p, b], want)
            np.testing.assert_array_equal(s.scales[:, b].astype(np.float32), scales[block])
    assert store.word(3, 0, 15) == (int(store.segment(3).planes[3, 0, 3]), int(store.segment(3).scales[3, 3].view(np.uint16)))
    rng = np.random.default_rng(1)
    for _ in range(3):
        depths = rng.integers(0, 5, d).astype(np.uint8)
        np.testing.assert_array_equal(store.decode(depths), decode_ref(codes, scales, depths))
    np.testing.assert_array_equal(store.decode(np.full(d, 4, np.uint8), 100, 7), decode_ref(codes, scales, [4] * d)[100:107])


def test_append_in_pieces_equals_bulk(keys):
    bulk = fathom.Store.from_keys(keys[:300], segment_blocks=2)
    pieces = fathom.Store(keys.shape[1], segment_blocks=2)
    for lo, hi in [(0, 1), (1, 63), (63, 64), (64, 200), (200, 299), (299, 300)]:
        pieces.append(keys[lo:hi] if hi - lo > 1 else keys[lo])
    for seg in range(bulk.segment_count):
        np.testing.assert_array_equal(bulk.segment(seg).planes, pieces.segment(seg).planes)
        np.testing.assert_array_equal(bulk.segment(seg).scales, pieces.segment(seg).scales)


def test_sizes_and_variance(keys):
    k128 = np.random.default_rng(3).standard_normal((640, 128)).astype(np.float32)
    store = fathom.Store.from_keys(k128)
    assert store.index_bytes == 68 * 640  # d/2 + d/32 bytes a token at d = 128
    np.testing.assert_allclose(store.variance(), k128.astype(np.float64).var(axis=0), rtol=1e-5)


def test_segment_views_outlive_the_store_object(keys):
    planes = fathom.Store.from_keys(keys).segment(0).planes  # the view keeps the store alive
    import gc

    gc.collect()
    codes, _ = quantize_ref(keys)
    want = ((codes[:64, 0] >> 3) & 1).astype(np.uint64) << np.arange(64, dtype=np.uint64)
    assert int(planes[0, 0, 0]) == int(want.sum())


def test_scan_against_numpy(keys):
    n, d = keys.shape
    store = fathom.Store.from_keys(keys)
    codes, scales = quantize_ref(keys)
    rng = np.random.default_rng(5)
    queries = rng.standard_normal((4, d)).astype(np.float32)
    depths = rng.integers(0, 5, d).astype(np.uint8)
    scores, nbytes = store.scan(queries, depths)
    assert scores.shape == (4, n)
    want = queries.astype(np.float64) @ decode_ref(codes, scales, depths).astype(np.float64).T
    np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    active = depths[depths > 0].astype(np.int64)
    assert nbytes == int(((n + 63) // 64) * (8 * active + 2).sum())  # planes + fp16 scales touched
    part, _ = store.scan(queries[0], depths, n=300)
    np.testing.assert_array_equal(part[0], scores[0, :300])


def test_centered_store(keys):
    """Codes of k - mu (the numpy reference's quantizer on the shifted keys)."""
    n, d = keys.shape
    mu = (keys.astype(np.float64).mean(axis=0) + 5.0).astype(np.float32)
    store = fathom.Store(d)
    assert store.center is None
    store.set_center(mu)
    store.append(keys)
    np.testing.assert_array_equal(store.center, mu)
    codes, scales = quantize_ref(keys - mu)
    depths = np.full(d, 4, np.uint8)
    np.testing.assert_array_equal(store.decode(depths), decode_ref(codes, scales, depths))
    with pytest.raises(fathom.FathomError):
        store.set_center(mu)  # fixed once keys are in


def test_rotated_store(keys):
    basis = fathom.Basis.fit(keys, keys[:50])
    assert basis.vectors.shape == (64, 64)
    np.testing.assert_allclose(basis.vectors.T @ basis.vectors, np.eye(64), atol=1e-4)
    rot = fathom.Store.from_keys(keys, basis=basis)
    plain = fathom.Store.from_keys(basis.rotate_key(keys))
    for seg in range(rot.segment_count):
        np.testing.assert_array_equal(rot.segment(seg).planes, plain.segment(seg).planes)
    np.testing.assert_allclose(basis.rotate_key(keys[0]), (keys[0] - basis.mean) @ basis.vectors, rtol=1e-4, atol=1e-5)
    again = fathom.Basis(basis.mean, basis.vectors, basis.eigenvalues)  # from explicit parts
    np.testing.assert_array_equal(again.vectors, basis.vectors)
    np.testing.assert_array_equal(again.rotate_query(keys[:3]), basis.rotate_query(keys[:3]))


def select_ref(scores, k, sink=4, local=32):
    n = scores.shape[0]
    if n <= k:
        return np.arange(n)
    forced = set(range(min(sink, n))) | set(range(max(n - local, 0), n))
    key = np.where(np.isnan(scores), -np.inf, scores)
    order = np.lexsort((np.arange(n), -key))  # highest score first, ties to the lower index
    chosen = list(forced)
    for i in order:
        if len(chosen) >= k:
            break
        if i not in forced:
            chosen.append(int(i))
    return np.sort(np.array(chosen))


@pytest.mark.parametrize("n,k", [(10, 64), (97, 54), (1000, 64), (1000, 37)])
def test_select_against_numpy(n, k):
    rng = np.random.default_rng(n + k)
    scores = np.round(rng.standard_normal(n), 1).astype(np.float32)  # rounding makes ties
    scores[rng.integers(0, n, 3)] = np.nan
    idx = fathom.select(scores, k)
    assert idx.dtype == np.uint32
    np.testing.assert_array_equal(idx, select_ref(scores, k))


def test_union_size():
    assert fathom.union_size([[1, 2, 5], [2, 3], []]) == 4
    assert fathom.union_size([np.arange(10, dtype=np.uint32), np.arange(5, 15, dtype=np.uint32)]) == 15


def attend_ref(q, K, V):
    s = (K.astype(np.float64) @ q.astype(np.float64)) / np.sqrt(q.shape[0])
    w = np.exp(s - s.max())
    return (w / w.sum()) @ V.astype(np.float64)


def test_attend_against_numpy(keys):
    rng = np.random.default_rng(11)
    d = keys.shape[1]
    values = rng.standard_normal(keys.shape).astype(np.float32)
    q = rng.standard_normal(d).astype(np.float32)
    np.testing.assert_allclose(fathom.attend(q, keys, values), attend_ref(q, keys, values), rtol=1e-5, atol=1e-6)
    idx = fathom.select(fathom.Store.from_keys(keys).scan(q, np.full(d, 4, np.uint8))[0][0], 128)
    sparse = fathom.attend(q, keys, values, idx)
    np.testing.assert_allclose(sparse, attend_ref(q, keys[idx], values[idx]), rtol=1e-5, atol=1e-6)
    dense = fathom.attend(q, keys, values)
    assert fathom.rel_l2(sparse, dense) == pytest.approx(np.linalg.norm(sparse - dense) / np.linalg.norm(dense), rel=1e-6)
    with pytest.raises(IndexError):
        fathom.attend(q, keys, values, np.array([len(keys)], np.uint32))


def test_landmarks_against_numpy(keys):
    lm = fathom.Landmarks(keys.shape[1])
    k = keys[:101]
    lm.append(k)
    q = np.random.default_rng(2).standard_normal((2, keys.shape[1])).astype(np.float32)
    scores, nbytes = lm.scan(q)
    # fp16 block means; the open last block's mean is over its 5 tokens
    means = np.stack([k[i:i + 8].mean(axis=0) for i in range(0, 101, 8)]).astype(np.float16).astype(np.float64)
    want = q.astype(np.float64) @ np.repeat(means, 8, axis=0)[:101].T
    np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4)
    assert nbytes > 0
