"""fathom.tier (KVTier, the fathom::tier_append / tier_step custom ops) and
TierBackend on a CUDA device, against independent references: the CPU
store (fathom_store_append through fathom.Store), dense attention in
float32, eager steps, and transformers' sdpa decode.

Without torch or a CUDA device (or without libfathom_cuda.so in the
package) the GPU tests skip, saying which; FATHOM_REQUIRE_GPU=1 (the GPU
machine's run) turns those skips into failures.
"""
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the tier tests need it)")

import fathom  # noqa: E402
from fathom import tier as T  # noqa: E402


def _need_gpu():
    why = None
    try:
        T.cuda_library()
    except fathom.UnsupportedError as e:
        why = str(e)
    if why is None and not torch.cuda.is_available():
        why = "torch sees no CUDA device"
    if why:
        if os.environ.get("FATHOM_REQUIRE_GPU"):
            pytest.fail(f"FATHOM_REQUIRE_GPU is set but the tier cannot run: {why}")
        pytest.skip(why)


@pytest.fixture
def gpu():
    _need_gpu()


def bf16_bits(x):
    return x.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def keys_like(n, heads, dim, seed):
    g = torch.Generator().manual_seed(seed)
    scale = torch.rand((heads, 1, dim), generator=g) * 2 + 0.1
    off = torch.randn((heads, 1, dim), generator=g)
    k = torch.randn((heads, n, dim), generator=g) * scale + off
    v = torch.randn((heads, n, dim), generator=g)
    return k.to(torch.bfloat16), v.to(torch.bfloat16)  # [H, n, d]


# ---------------------------------------------------------------- without a GPU

def test_methods_and_capacity_classes():
    assert T.parse_method("fathom:48") == ("fathom", 48)
    assert T.parse_method("ds:32") == ("ds", 32)
    assert T.parse_method("fathom-centered:48") == ("fathom-centered", 48)
    for bad in ("sparq:16", "dense", "fathom:0", "ds", "fathom-centered:0", "fathom-klt:48"):
        with pytest.raises(fathom.UnsupportedError, match="fixed depths"):
            T.parse_method(bad)
    from fathom._hf_tier import capacity_class
    for n in (1, 1000, 1025, 4097, 131072, 131073, 524289):
        c = capacity_class(n)
        assert c >= n and c <= max(1024, n) * 1.125 + 1
    assert capacity_class(131073) == 131072 + 16384


def test_missing_cuda_library_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(T, "_cuda", None)
    monkeypatch.setenv("FATHOM_CUDA_LIBRARY", "/nonexistent/libfathom_cuda.so")
    with pytest.raises(fathom.UnsupportedError, match="FATHOM_CUDA=1 pip install"):
        T.KVTier(1, 1, 1, 64)


# ---------------------------------------------------------------- on the GPU

def append_all(tier, sessions, chunks, dev):
    """chunks: per session a list of ([H, t, d] K, V) pieces, appended in turn (ragged counts)."""
    L = tier.layers
    rounds = max(len(c) for c in chunks)
    for r in range(rounds):
        ks, vs, counts = [], [], []
        for c in chunks:
            k, v = c[r] if r < len(c) else (c[0][0][:, :0], c[0][1][:, :0])
            ks.append(k.transpose(0, 1))
            vs.append(v.transpose(0, 1))
            counts.append(k.shape[1])
        K = torch.cat(ks).contiguous().to(dev)
        V = torch.cat(vs).contiguous().to(dev)
        cnt = torch.tensor(counts, dtype=torch.int32, device=dev)
        sess = tier.sessions_tensor(sessions)
        for layer in range(L):
            tier.append(layer, sess, K, V, counts=cnt, max_count=max(counts))


def test_append_equals_cpu_store(gpu):
    dev = torch.device("cuda")
    H, D, S = 2, 128, 32  # segments of 2048 tokens
    splits = [[1, 62, 1, 700, 1400, 1, 1, 3], [2100, 1, 64, 5]]  # cross blocks and a segment boundary
    with T.KVTier(2, H, 2, D, max_sessions=2, max_tokens=8192, segment_blocks=S) as tier:
        sessions = [tier.session(), tier.session()]
        chunks, full = [], []
        for i, sp in enumerate(splits):
            n = sum(sp)
            tier.reserve(sessions[i], n)
            k, v = keys_like(n, H, D, seed=i)
            full.append((k, v))
            cuts = np.cumsum([0] + sp)
            chunks.append([(k[:, a:b], v[:, a:b]) for a, b in zip(cuts[:-1], cuts[1:])])
        append_all(tier, sessions, chunks, dev)
        tier.check()
        compared = 0
        for i, s in enumerate(sessions):
            k, v = full[i]
            n = k.shape[1]
            assert tier.length(s) == n
            for layer in range(2):
                for h in range(H):
                    store = fathom.Store(D, segment_blocks=S)
                    store.append(k[h].float().numpy())
                    for seg in range(store.segment_count):
                        cpu = store.segment(seg)
                        g = tier.segment(s, layer, h, seg)
                        assert g["first_token"] == cpu.first_token
                        nb = cpu.blocks
                        np.testing.assert_array_equal(g["planes"][:, :, :nb], cpu.planes[:, :, :nb])
                        np.testing.assert_array_equal(g["scales"][:, :nb], cpu.scales[:, :nb].view(np.uint16))
                        t0, t1 = cpu.first_token, cpu.first_token + cpu.tokens
                        np.testing.assert_array_equal(g["kv"][:cpu.tokens, 0], bf16_bits(k[h, t0:t1]))
                        np.testing.assert_array_equal(g["kv"][:cpu.tokens, 1], bf16_bits(v[h, t0:t1]))
                        compared += nb
                    shift, s1, s2 = tier.sums(s, layer, h)
                    var = s2 / n - (s1 / n) ** 2
                    np.testing.assert_allclose(var, store.variance(), rtol=1e-5, atol=1e-6)
        assert compared == 2 * H * sum(math.ceil(sum(sp) / 64) for sp in splits)


def first_append_mean(k):
    """k [t, d] bf16 -> the center fathom_index_append takes: per channel the
    float64 sum of the rows in order, divided by t, rounded once to float32."""
    rows = k.float().numpy().astype(np.float64)
    acc = np.zeros(rows.shape[1])
    for r in rows:
        acc = acc + r
    return (acc / rows.shape[0]).astype(np.float32)


def test_centered_append_equals_cpu_store(gpu):
    """fathom-centered on the tier: a session centered on its first append's
    mean and one on a given center, appended in ragged chunks, hold the
    planes and scales of a CPU Store given that center (Store.set_center)
    and fed the same keys; the taken center is the first append's mean bit
    for bit, and the K rows stay raw."""
    dev = torch.device("cuda")
    L, H, D, S = 2, 2, 128, 32
    splits = [[700, 1, 62, 1400, 1, 3], [2100, 64, 5]]
    given = np.random.default_rng(3).normal(0, 2, (L, H, D)).astype(np.float32)
    with T.KVTier(L, H, 2, D, max_sessions=2, max_tokens=8192, segment_blocks=S) as tier:
        sessions = [tier.session(), tier.session()]
        tier.set_center(sessions[0])
        tier.set_center(sessions[1], given)
        assert tier.center(sessions[0], 0, 0) is None  # not taken before the first append
        np.testing.assert_array_equal(tier.center(sessions[1], 1, 1), given[1, 1])
        with pytest.raises(ValueError, match="center shape"):
            tier.set_center(sessions[1], given[0])
        bad = given.copy()
        bad[1, 0, 7] = np.nan
        with pytest.raises(fathom.NonFiniteError, match="layer 1 head 0 channel 7 is not finite"):
            tier.set_center(sessions[1], bad)
        chunks, full = [], []
        for i, sp in enumerate(splits):
            n = sum(sp)
            tier.reserve(sessions[i], n)
            k, v = keys_like(n, H, D, seed=30 + i)
            full.append((k, v))
            cuts = np.cumsum([0] + sp)
            chunks.append([(k[:, a:b], v[:, a:b]) for a, b in zip(cuts[:-1], cuts[1:])])
        append_all(tier, sessions, chunks, dev)
        tier.check()
        with pytest.raises(fathom.StateError, match="already holds"):
            tier.set_center(sessions[0])
        compared = 0
        for i, s in enumerate(sessions):
            k, v = full[i]
            for layer in range(L):
                for h in range(H):
                    mu = first_append_mean(k[h, :splits[0][0]]) if i == 0 else given[layer, h]
                    got = tier.center(s, layer, h)
                    assert got is not None and got.view(np.uint32).tolist() == mu.view(np.uint32).tolist()
                    store = fathom.Store(D, segment_blocks=S)
                    store.set_center(mu)
                    store.append(k[h].float().numpy())
                    for seg in range(store.segment_count):
                        cpu = store.segment(seg)
                        g = tier.segment(s, layer, h, seg)
                        nb = cpu.blocks
                        np.testing.assert_array_equal(g["planes"][:, :, :nb], cpu.planes[:, :, :nb])
                        np.testing.assert_array_equal(g["scales"][:, :nb], cpu.scales[:, :nb].view(np.uint16))
                        t0, t1 = cpu.first_token, cpu.first_token + cpu.tokens
                        np.testing.assert_array_equal(g["kv"][:cpu.tokens, 0], bf16_bits(k[h, t0:t1]))
                        compared += nb
        assert compared == L * H * sum(math.ceil(sum(sp) / 64) for sp in splits)


def test_centered_step_selects_as_the_cpu(gpu):
    """A centered session's step (k < n) attends over the selection of the
    CPU's fathom-centered:32 (fathom.Index scores + fathom.select): its LSE
    equals the float64 log-sum-exp over that selection, and on these
    offset keys fathom:32 selects otherwise for some query head."""
    dev = torch.device("cuda")
    H, G, D, n, k, B = 2, 4, 128, 3000, 128, 32
    scale = 1.0 / math.sqrt(D)
    with T.KVTier(1, H, G, D, max_sessions=1, max_tokens=4096) as tier:
        s = tier.session()
        tier.set_center(s)
        tier.reserve(s, n)
        keys, vals = keys_like(n, H, D, seed=41)
        keys = (keys.float() + 4 * torch.randn((H, 1, D), generator=torch.Generator().manual_seed(42))).to(
            torch.bfloat16)  # offsets of a few standard deviations
        append_all(tier, [s], [[(keys[:, :1000], vals[:, :1000]), (keys[:, 1000:], vals[:, 1000:])]], dev)
        q = (0.3 * torch.randn((1, H, G, D), generator=torch.Generator().manual_seed(43))).to(torch.bfloat16)
        out, lse = tier.step(0, tier.sessions_tensor([s]), q.to(dev), capacity=4096, k=k, budget=B, scale=scale)
        tier.check()
        lse = lse.cpu().numpy()
        differ = 0
        for h in range(H):
            K = keys[h].float().numpy()
            ix = fathom.Index([f"fathom-centered:{B}", f"fathom:{B}"], D)
            ix.append(K[:1000])  # the same first append: the same center
            ix.append(K[1000:])
            qh = q[0, h].float().numpy()
            centered = ix.scores(f"fathom-centered:{B}", qh)[0]
            raw = ix.scores(f"fathom:{B}", qh)[0]
            for g in range(G):
                sel = fathom.select(centered[g], k)
                logits = (K[sel].astype(np.float64) @ qh[g].astype(np.float64)) * scale
                ref = logits.max() + math.log(np.exp(logits - logits.max()).sum())
                assert abs(lse[0, h, g] - ref) <= 1e-4 * (1 + abs(ref)), (h, g, lse[0, h, g], ref)
                differ += not np.array_equal(sel, fathom.select(raw[g], k))
        assert differ > 0


def dense_reference(k, v, q, scale):
    """k, v [H, n, d], q [H, G, d] -> (out [H, G, d], lse [H, G]) in float32."""
    s = torch.einsum("hgd,hnd->hgn", q.float(), k.float()) * scale
    return torch.softmax(s, -1) @ v.float(), torch.logsumexp(s, -1)


def test_step_is_dense_attention_when_k_covers_n(gpu):
    dev = torch.device("cuda")
    H, G, D = 2, 4, 128
    lens = [300, 517]
    with T.KVTier(1, H, G, D, max_sessions=2, max_tokens=4096) as tier:
        sessions = [tier.session() for _ in lens]
        kv = [keys_like(n, H, D, seed=10 + i) for i, n in enumerate(lens)]
        for s, n in zip(sessions, lens):
            tier.reserve(s, n)
        append_all(tier, sessions, [[x] for x in kv], dev)
        q = torch.randn((2, H, G, D), generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
        scale = 0.7 / math.sqrt(D)
        # k = 1024 >= n (G x k <= 4096): every token selected
        out, lse = tier.step(0, tier.sessions_tensor(sessions), q.to(dev), capacity=1024, k=1024, budget=48,
                             scale=scale)
        tier.check()
        for i, (k, v) in enumerate(kv):
            ref, ref_lse = dense_reference(k, v, q[i], scale)
            got = out[i].float().cpu()
            assert (got - ref).abs().max() <= 0.02 * ref.abs().max() + 1e-3, (got - ref).abs().max()
            np.testing.assert_allclose(lse[i].cpu().numpy(), ref_lse.numpy(), rtol=2e-3, atol=2e-3)


def test_fixed_depths_step_equals_the_cpu_library(gpu):
    """ds:c through the tier (fixed depths, k < n) == the CPU library's scan
    at the same depths, select and attend, per query head."""
    dev = torch.device("cuda")
    H, G, D, n, k, c = 2, 2, 128, 3000, 64, 32
    with T.KVTier(1, H, G, D, max_sessions=1, max_tokens=4096) as tier:
        s = tier.session()
        tier.reserve(s, n)
        keys, vals = keys_like(n, H, D, seed=21)
        append_all(tier, [s], [[(keys, vals)]], dev)
        torch.cuda.synchronize()
        depths = tier.ds_depths(s, 0, c)
        power = (keys.float() ** 2).mean(1).numpy()  # [H, D]
        for h in range(H):
            assert sorted(np.flatnonzero(depths[h] == 4)) == sorted(np.argsort(-power[h])[:c])
            assert (depths[h] == 4).sum() == c and (depths[h] == 0).sum() == D - c
        q = torch.randn((1, H, G, D), generator=torch.Generator().manual_seed(22)).to(torch.bfloat16)
        out, _ = tier.step(0, tier.sessions_tensor([s]), q.to(dev), capacity=4096, k=k,
                           fixed_depths=torch.from_numpy(depths)[None].to(dev))
        tier.check()
        for h in range(H):
            K, V = keys[h].float().numpy(), vals[h].float().numpy()
            store = fathom.Store.from_keys(K)
            scores, _ = store.scan(q[0, h].float().numpy(), depths[h])
            for g in range(G):
                idx = fathom.select(scores[g], k)
                ref = fathom.attend(q[0, h, g].float().numpy(), K, V, idx)
                got = out[0, h, g].float().cpu().numpy()
                np.testing.assert_allclose(got, ref, atol=0.01 * np.abs(ref).max() + 2e-3, rtol=0.02)


def test_graph_replay_while_growing_equals_eager(gpu):
    """One captured append+step replayed for 100 steps across block and
    segment boundaries (k < n: real selection) == the same steps eager."""
    dev = torch.device("cuda")
    H, G, D, S, start, steps = 2, 2, 64, 32, 2000, 100
    tiers = [T.KVTier(1, H, G, D, max_sessions=1, max_tokens=4096, segment_blocks=S) for _ in range(2)]
    try:
        k0, v0 = keys_like(start, H, D, seed=3)
        sess = []
        for t in tiers:
            s = t.session()
            t.reserve(s, start + steps + 2)
            append_all(t, [s], [[(k0, v0)]], dev)
            sess.append(t.sessions_tensor([s]))
        kin = torch.empty((1, H, D), dtype=torch.bfloat16, device=dev)
        vin, qin = torch.empty_like(kin), torch.empty((1, H, G, D), dtype=torch.bfloat16, device=dev)
        cap = 4096

        def step(t, s):
            t.append(0, s, kin, vin)
            return t.step(0, s, qin, capacity=cap, k=64, budget=32)

        g = torch.Generator(device=dev).manual_seed(9)
        new = lambda: (torch.randn(kin.shape, device=dev, generator=g).to(torch.bfloat16),
                       torch.randn(kin.shape, device=dev, generator=g).to(torch.bfloat16),
                       torch.randn(qin.shape, device=dev, generator=g).to(torch.bfloat16))
        # warm-up on a side stream (one real step on both tiers), then capture tier 0's step
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for x, y in zip((kin, vin, qin), new()):
                x.copy_(y)
            for t, s in zip(tiers, sess):
                step(t, s)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gout, glse = step(tiers[0], sess[0])
        worst = 0.0
        for i in range(steps):
            x = new()
            for dst, src in zip((kin, vin, qin), x):
                dst.copy_(src)
            graph.replay()
            eout, else_ = step(tiers[1], sess[1])
            assert torch.equal(gout, eout), f"step {i}: graph and eager outputs differ"
            assert torch.equal(glse, else_)
            worst = max(worst, float(eout.float().abs().max()))
        for t in tiers:
            t.check()
        assert worst > 0  # outputs were not all zero
        assert tiers[0].length(0) == tiers[1].length(0) == start + 1 + steps
    finally:
        for t in tiers:
            t.close()


def test_under_torch_compile(gpu):
    dev = torch.device("cuda")
    with T.KVTier(1, 2, 2, 64, max_sessions=1, max_tokens=4096) as tier:
        s = tier.session()
        tier.reserve(s, 600)
        k, v = keys_like(500, 2, 64, seed=4)
        append_all(tier, [s], [[(k, v)]], dev)
        sessions = tier.sessions_tensor([s])
        q = torch.randn((1, 2, 2, 64), device=dev).to(torch.bfloat16)
        kn, vn = (x.transpose(0, 1).contiguous().to(dev) for x in keys_like(1, 2, 64, seed=8))

        step = lambda q: tier.step(0, sessions, q, capacity=1024, k=128, budget=40)

        def grow(q):  # append, then the step must see the new token
            tier.append(0, sessions, kn, vn)
            out, lse = step(q)
            return out.float() * 2, lse

        ref0 = step(q)  # eager (and the workspace cached, so that tracing finds it)
        out0 = torch.compile(step, fullgraph=True, backend="aot_eager")(q)
        out1, lse1 = torch.compile(grow, fullgraph=True, backend="aot_eager")(q)
        ref1 = step(q)
        tier.check()
        assert tier.length(s) == 501
        assert torch.equal(out0[0], ref0[0]) and torch.equal(out0[1], ref0[1])
        assert torch.equal(out1, ref1[0].float() * 2) and torch.equal(lse1, ref1[1])
        assert not torch.equal(ref0[0], ref1[0])  # the appended token changed the output


def test_bad_arguments_name_the_problem(gpu):
    dev = torch.device("cuda")
    with T.KVTier(1, 2, 2, 64, max_sessions=1, max_tokens=4096) as tier:
        s = tier.sessions_tensor([tier.session()])
        k = torch.zeros((1, 2, 64), dtype=torch.bfloat16, device=dev)
        with pytest.raises(TypeError, match="keys: dtype torch.float32"):
            tier.append(0, s, k.float(), k)
        with pytest.raises(ValueError, match="on cpu"):
            tier.append(0, s, k.cpu(), k)
        with pytest.raises(ValueError, match=r"shape \[1, 3, 64\]"):
            tier.append(0, s, torch.zeros((1, 3, 64), dtype=torch.bfloat16, device=dev), k)
        with pytest.raises(ValueError, match="not contiguous"):
            tier.append(0, s, torch.zeros((1, 64, 2), dtype=torch.bfloat16, device=dev).transpose(1, 2), k)
        with pytest.raises(TypeError, match="sessions: dtype torch.int64"):
            tier.append(0, s.long(), k, k)
        with pytest.raises(ValueError, match="layer 1 not in"):
            tier.append(1, s, k, k)
        q = torch.zeros((1, 2, 2, 64), dtype=torch.bfloat16, device=dev)
        with pytest.raises(fathom.InvalidArgumentError, match="k 4000 not in"):
            tier.step(0, s, q, capacity=1024, k=4000, budget=40, sink=0, local=0)
        with pytest.raises(ValueError, match=r"queries: shape \[1, 2, 4, 64\]"):
            tier.step(0, s, torch.zeros((1, 2, 4, 64), dtype=torch.bfloat16, device=dev), capacity=1024, k=64,
                      budget=40)
        tier.reserve(int(s[0]), 64)
        tier.check()
        with pytest.raises(fathom.InvalidArgumentError):
            tier.truncate(int(s[0]), 5)  # longer than the session


def test_fork_truncate_usage(gpu):
    dev = torch.device("cuda")
    with T.KVTier(1, 1, 1, 64, max_sessions=2, max_tokens=8192, segment_blocks=32) as tier:
        a = tier.session()
        tier.reserve(a, 3000)
        k, v = keys_like(3000, 1, 64, seed=6)
        append_all(tier, [a], [[(k, v)]], dev)
        b = tier.fork(a)
        ua, ub = tier.usage(a), tier.usage(b)
        assert ua["length"] == ub["length"] == 3000 and ub["shared_segments"] == 1
        tier.truncate(b, 100)
        assert tier.length(b) == 100 and tier.length(a) == 3000
        store = fathom.Store(64, segment_blocks=32)
        store.append(k[0, :100].float().numpy())
        np.testing.assert_array_equal(tier.segment(b, 0, 0, 0)["planes"][:, :, :2], store.segment(0).planes[:, :, :2])


def step_counting_cache_hits(tier, sessions, q, capacity, k, budget):
    """tier.step's work through fathom_cuda_tier_step directly, with the
    step's count of bytes read from the HBM cache: (out, lse, [plane bytes,
    row bytes])."""
    import ctypes as C
    from fathom._structs import StepArgs
    dev = tier.device
    B = sessions.shape[0]
    ws = tier.workspace(B, capacity, k)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=dev)
    hits = torch.zeros(2, dtype=torch.int64, device=dev)
    args = StepArgs(layer=0, sessions=sessions.data_ptr(), batch=B, capacity_tokens=capacity, k=k, sink=4,
                    local=32, budget=budget, scale=1.0 / math.sqrt(tier.dim), queries=q.data_ptr(),
                    out=out.data_ptr(), lse=lse.data_ptr(), workspace=ws.data_ptr(), workspace_bytes=ws.numel(),
                    cache_bytes=hits.data_ptr())
    tier._lib.fathom_cuda_tier_step(tier._h(), C.byref(args), C.c_void_p(torch.cuda.current_stream().cuda_stream))
    return out, lse, hits.cpu().tolist()


@pytest.mark.parametrize("row_ways", [1, 4])
def test_hbm_cache_keeps_the_step_bits(gpu, row_ways):
    """A session with an HBM cache (plane lines ranked by a window of plans,
    filled every 3 steps, and row slots, direct-mapped or in 4-way sets)
    steps to the same bits as an identical session without one, over 12
    growing decode steps (k < n), and its steps read plane and row bytes from
    the cache."""
    dev = torch.device("cuda")
    L, H, G, D, n, k, budget, cap = 2, 2, 2, 128, 6000, 64, 48, 8192
    with T.KVTier(L, H, G, D, max_sessions=2, max_tokens=cap) as tier:
        a, b = tier.session(), tier.session()
        for s in (a, b):
            tier.reserve(s, n + 16)
        kv = keys_like(n, H, D, seed=31)
        append_all(tier, [a, b], [[kv], [kv]], dev)
        blocks = -(-cap // 64)
        rows = L * H * 512 // row_ways * T.row_set_bytes(D, row_ways)  # 512 slots
        tier.cache_set(a, plane_bytes=L * H * 10 * blocks * 40, row_bytes=rows, tokens=cap, window=4,
                       row_ways=row_ways)
        assert tier.cache_bytes(a) > 0 and tier.cache_bytes(b) == 0
        g = torch.Generator(device=dev).manual_seed(32)
        sa, sb = tier.sessions_tensor([a]), tier.sessions_tensor([b])
        hits = [0, 0]
        for i in range(12):
            kn = torch.randn((1, H, D), device=dev, generator=g).to(torch.bfloat16)
            vn = torch.randn((1, H, D), device=dev, generator=g).to(torch.bfloat16)
            q = torch.randn((1, H, G, D), device=dev, generator=g).to(torch.bfloat16)
            for layer in range(L):
                for s in (sa, sb):
                    tier.append(layer, s, kn, vn)
            if i % 3 == 0:
                tier.cache_fill(a)
            oa, la, h = step_counting_cache_hits(tier, sa, q, cap, k, budget)
            ob, lb = tier.step(0, sb, q, capacity=cap, k=k, budget=budget)
            assert torch.equal(oa, ob) and torch.equal(la, lb), f"step {i}: the cache changed the output"
            hits = [x + y for x, y in zip(hits, h)]
        tier.check()
        assert hits[0] > 0, "no plane bytes came from the cache"
        assert hits[1] > 0, "no row bytes came from the cache"
        tier.cache_set(a)  # all zero: freed
        assert tier.cache_bytes(a) == 0
        with pytest.raises(ValueError, match="must be >= 0"):
            tier.cache_set(a, plane_bytes=-1)
        with pytest.raises(ValueError, match="window 256 not in"):
            tier.cache_set(a, plane_bytes=1 << 20, window=256)
        with pytest.raises(ValueError, match="row_ways 3 not one of"):
            tier.cache_set(a, row_bytes=1 << 20, row_ways=3)
        with pytest.raises(fathom.InvalidArgumentError):
            tier.cache_set(a, plane_bytes=L * H * 10 * blocks - 1)  # less than one line per (layer, head)


def test_read_ahead_keeps_the_step_bits(gpu):
    """A session with read-ahead (and a partial plane cache) steps every
    layer of 10 growing decode steps to the same bits as an identical session
    without, the queries changing every other step."""
    dev = torch.device("cuda")
    L, H, G, D, n, k, budget, cap = 3, 2, 2, 128, 6000, 64, 48, 8192
    with T.KVTier(L, H, G, D, max_sessions=2, max_tokens=cap) as tier:
        a, b = tier.session(), tier.session()
        for s in (a, b):
            tier.reserve(s, n + 16)
        kv = keys_like(n, H, D, seed=41)
        append_all(tier, [a, b], [[kv], [kv]], dev)
        blocks = -(-cap // 64)
        tier.cache_set(a, plane_bytes=L * H * 10 * blocks * 20, tokens=cap, window=4, ahead_lines=budget,
                       ahead_rows=G * k)
        assert tier.cache_bytes(a) > 2 * H * G * k * 4 * D and tier.cache_bytes(b) == 0
        g = torch.Generator(device=dev).manual_seed(42)
        sa, sb = tier.sessions_tensor([a]), tier.sessions_tensor([b])
        for i in range(10):
            kn = torch.randn((1, H, D), device=dev, generator=g).to(torch.bfloat16)
            vn = torch.randn((1, H, D), device=dev, generator=g).to(torch.bfloat16)
            if i % 2 == 0:
                qs = [torch.randn((1, H, G, D), device=dev, generator=g).to(torch.bfloat16) for _ in range(L)]
            for layer in range(L):
                for s in (sa, sb):
                    tier.append(layer, s, kn, vn)
            for layer in range(L):
                oa, la = tier.step(layer, sa, qs[layer], capacity=cap, k=k, budget=budget)
                ob, lb = tier.step(layer, sb, qs[layer], capacity=cap, k=k, budget=budget)
                assert torch.equal(oa, ob) and torch.equal(la, lb), f"step {i}, layer {layer}: read-ahead changed it"
        # a graph of the L layers' steps, each but the last starting its read-ahead after its own work
        tier.set_ahead_start("between")
        qin = [q.clone() for q in qs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for layer in range(L):
                tier.step(layer, sa, qin[layer], capacity=cap, k=k, budget=budget)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gout = [tier.step(layer, sa, qin[layer], capacity=cap, k=k, budget=budget) for layer in range(L)]
        for i in range(4):
            for q in qin:
                q.copy_(torch.randn(q.shape, device=dev, generator=g).to(torch.bfloat16))
            graph.replay()
            for layer in range(L):
                ob, lb = tier.step(layer, sb, qin[layer], capacity=cap, k=k, budget=budget)
                assert torch.equal(gout[layer][0], ob) and torch.equal(gout[layer][1], lb), f"replay {i}, layer {layer}"
        # a graph of two decode steps whose every step starts its read-ahead after its own work: the second's
        # layer 0 joins the first's last layer's, and ahead_join the second's before the capture ends
        tier.set_ahead_start("across")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gout = [tier.step(i % L, sa, qin[i % L], capacity=cap, k=k, budget=budget) for i in range(2 * L)]
            tier.ahead_join()
        for i in range(4):
            for q in qin:
                q.copy_(torch.randn(q.shape, device=dev, generator=g).to(torch.bfloat16))
            graph.replay()
            for j in range(2 * L):
                ob, lb = tier.step(j % L, sb, qin[j % L], capacity=cap, k=k, budget=budget)
                assert torch.equal(gout[j][0], ob) and torch.equal(gout[j][1], lb), f"across replay {i}, step {j}"
        with pytest.raises(ValueError, match="not 'beside', 'between' or 'across'"):
            tier.set_ahead_start("after")
        tier.check()
        with pytest.raises(ValueError, match="ahead_lines 513 not in"):
            tier.cache_set(a, ahead_lines=4 * D + 1)
        with pytest.raises(ValueError, match="ahead_rows 4097"):
            tier.cache_set(a, ahead_rows=4097)
        tier.cache_set(a)
        assert tier.cache_bytes(a) == 0


def test_backend_with_an_hbm_cache_decodes_the_same_bits(gpu):
    """TierBackend with cache_bytes (filled at the first step and every 3,
    with read-ahead) and with read-ahead alone gives the same outputs as
    without, step by step, and holds device memory for them."""
    from fathom._hf_tier import TierBackend

    dev = torch.device("cuda")
    sh = dict(layers=2, kv_heads=2, group=2, dim=64, batch=2, method="fathom:32", k=64, max_tokens=8192)
    backends = [TierBackend(**sh, cache_bytes=4 << 20, cache_fill_every=3, read_ahead="beside"),
                TierBackend(**sh, read_ahead="across"), TierBackend(**sh)]
    try:
        g = torch.Generator(device=dev).manual_seed(33)
        prompt = torch.randn((2, 2, 3000, 64), device=dev, generator=g).to(torch.bfloat16)
        for be in backends:
            be.prepare(3000 + 16)
            for layer in range(2):
                be.append(layer, prompt, prompt * 0.5)
        assert all(be.tier.cache_bytes(s) > 0 for be in backends[:2] for s in be.sessions)
        for i in range(10):
            kn = torch.randn((2, 2, 1, 64), device=dev, generator=g).to(torch.bfloat16)
            q = torch.randn((2, 4, 1, 64), device=dev, generator=g).to(torch.bfloat16)
            outs = []
            for be in backends:
                o = []
                for layer in range(2):
                    be.append(layer, kn, -kn)
                    o.append(be.attend(layer, q, 0.125))
                outs.append(torch.stack(o))
            assert torch.equal(outs[0], outs[2]), f"step {i}: the cache changed the output"
            assert torch.equal(outs[1], outs[2]), f"step {i}: the read-ahead changed the output"
        for be in backends:
            be.check()
        assert backends[0]._steps == 10
        with pytest.raises(ValueError, match="read_ahead 'after'"):
            TierBackend(**sh, read_ahead="after")
    finally:
        for be in backends:
            be.close()


@pytest.mark.parametrize("method", ["fathom:48", "ds:32", "fathom-centered:48"])
def test_backend_decode_matches_transformers_sdpa(gpu, method):
    """k >= n: 64 teacher-forced decode steps of a random-init Qwen3 (bf16)
    through TierBackend (dense prefill, tier steps after) == transformers'
    sdpa with its DynamicCache, within bf16 tolerance."""
    transformers = pytest.importorskip("transformers")
    from fathom import serve_bench as sb
    from fathom._hf_tier import TierBackend

    sb.register()
    cfg = sb.make_config("tiny-qwen3", 4096)
    model = sb.make_model(cfg, device="cuda", dtype=torch.bfloat16, seed=2)
    B, prompt, steps = 2, 40, 64
    toks = torch.randint(0, cfg.vocab_size, (B, prompt + steps), device="cuda",
                         generator=torch.Generator(device="cuda").manual_seed(1))
    with torch.no_grad():
        ref_cache = transformers.DynamicCache(config=cfg)
        ref = [model(input_ids=toks[:, :prompt], past_key_values=ref_cache, use_cache=True).logits[:, -1]]
        for t in range(prompt, prompt + steps - 1):
            ref.append(model(input_ids=toks[:, t:t + 1], past_key_values=ref_cache, use_cache=True).logits[:, -1])
        backend = TierBackend(**sb.shape_of(cfg), batch=B, method=method, k=1024 // 2,
                              max_tokens=4096)
        try:
            sb.attach(model, backend, "fathom_tier")
            cache = sb.TierCache(backend)
            pos = torch.arange(prompt + steps, device="cuda")[None].expand(B, -1)
            kw = dict(attention_mask={"full_attention": None}, past_key_values=cache, use_cache=True)
            got = [model(input_ids=toks[:, :prompt], position_ids=pos[:, :prompt], **kw).logits[:, -1]]
            for t in range(prompt, prompt + steps - 1):
                got.append(model(input_ids=toks[:, t:t + 1], position_ids=pos[:, t:t + 1], **kw).logits[:, -1])
            backend.check()
            assert backend.length() == prompt + steps - 1
            for s in backend.sessions:  # centered on the prompt's keys, uncentered otherwise
                assert (backend.tier.center(s, 0, 0) is not None) == (method == "fathom-centered:48")
        finally:
            sb.attach(model, None, "sdpa")
            backend.close()
    ref, got = torch.stack(ref).float(), torch.stack(got).float()
    err = (got - ref).abs().max().item()
    assert err <= 0.03 * ref.abs().max().item(), f"max |logit diff| {err}"
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.95


@pytest.mark.parametrize("method", ["fathom:48", "fathom-centered:48"])
def test_fathom_cache_on_cuda_matches_transformers_sdpa(gpu, method):
    """fathom.transformers' FathomCache with the model on CUDA picks
    TierBackend; with k >= n its 64 teacher-forced decode steps of a
    random-init Qwen3 (bf16) equal transformers' sdpa within bf16 tolerance."""
    transformers = pytest.importorskip("transformers")
    ft = pytest.importorskip("fathom.transformers")
    from fathom import serve_bench as sb
    from fathom._hf_tier import TierBackend

    cfg = sb.make_config("tiny-qwen3", 4096)
    model = sb.make_model(cfg, device="cuda", dtype=torch.bfloat16, seed=3)
    B, prompt, steps = 2, 40, 64
    toks = torch.randint(0, cfg.vocab_size, (B, prompt + steps), device="cuda",
                         generator=torch.Generator(device="cuda").manual_seed(2))

    def decode(cache):
        out = [model(input_ids=toks[:, :prompt], past_key_values=cache, use_cache=True).logits[:, -1]]
        for t in range(prompt, prompt + steps - 1):
            out.append(model(input_ids=toks[:, t:t + 1], past_key_values=cache, use_cache=True).logits[:, -1])
        return torch.stack(out).float()

    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        ref = decode(transformers.DynamicCache(config=cfg))
        model.set_attn_implementation(ft.NAME)
        cache = ft.FathomCache(model, method=method, k=512)
        try:
            got = decode(cache)
            assert isinstance(cache.backend, TierBackend)
            assert (cache.backend.tier.center(cache.backend.sessions[0], 1, 0) is not None) == (
                method == "fathom-centered:48")
            cache.backend.check()
            assert cache.backend.length() == prompt + steps - 1
        finally:
            cache.close()
            model.set_attn_implementation("sdpa")
    err = (got - ref).abs().max().item()
    assert err <= 0.03 * ref.abs().max().item(), f"max |logit diff| {err}"
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.95
