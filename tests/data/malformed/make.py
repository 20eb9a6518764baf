#!/usr/bin/env python3
"""Write the malformed-input corpus next to this script: files that every
reader must reject with a clear error (tests/cli/test_malformed.sh checks the
message each one gets, listed in EXPECT), also the seeds of the fuzz targets
(scripts/fuzz). Deterministic; rerun after adding a case and commit both.

  gguf/      GGUF images: fathom_gguf_open / fathom_model_open must fail
  capture/   safetensors captures: fathom_capture_open must fail
  methods/   method lists: fathom_method_parse_list must fail
  preset/    synthetic preset files: fathom_synth_preset_load must fail
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(kind, name, data):
    os.makedirs(os.path.join(HERE, kind), exist_ok=True)
    with open(os.path.join(HERE, kind, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- GGUF --------------------------------------------------------------
STRING, ARRAY, UINT32, F32_TYPE = 8, 9, 4, 0


def s(text):
    b = text if isinstance(text, bytes) else text.encode()
    return struct.pack("<Q", len(b)) + b


def kv_str(key, val):
    return s(key) + struct.pack("<I", STRING) + s(val)


def kv_u32(key, val):
    return s(key) + struct.pack("<I", UINT32) + struct.pack("<I", val)


def gguf(kvs, tensors=b"", n_tensors=0, version=3, data=b""):
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs) + tensors
    pad = (-len(head)) % 32
    return head + b"\0" * pad + data


def tensor(name, dims, ggml_type, offset):
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) \
        + struct.pack("<IQ", ggml_type, offset)


write("gguf", "bad_magic.gguf", b"GGUX" + gguf([])[4:])
write("gguf", "truncated_header.gguf", b"GGUF\x03\x00\x00\x00\x01\x00")
write("gguf", "version_9.gguf", gguf([], version=9))
write("gguf", "arch_with_nul.gguf", gguf([kv_str("general.architecture", b"llama\0evil")]))
write("gguf", "key_with_nul.gguf", gguf([kv_str(b"general.arch\0itecture", "llama")]))
write("gguf", "string_length_2e63.gguf",
      gguf([s("general.architecture") + struct.pack("<IQ", STRING, 1 << 63) + b"llama"]))
write("gguf", "array_count_2e60.gguf",
      gguf([s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, 1 << 60)]))
write("gguf", "bad_value_type.gguf", gguf([s("k") + struct.pack("<I", 13) + b"\0" * 8]))
write("gguf", "duplicate_key.gguf", gguf([kv_u32("a.b", 1), kv_u32("a.b", 2)]))
write("gguf", "tensor_5_dims.gguf", gguf([], tensor("w", [1, 1, 1, 1, 1], F32_TYPE, 0), 1))
write("gguf", "tensor_past_end.gguf",
      gguf([], tensor("w", [1 << 20], F32_TYPE, 0), 1, data=b"\0" * 64))
write("gguf", "unknown_architecture.gguf", gguf([kv_str("general.architecture", "gpt-j")]))
write("gguf", "llama_without_hparams.gguf", gguf([kv_str("general.architecture", "llama")]))

# ---- captures (safetensors) ---------------------------------------------
Q, K = [1, 1, 4], [1, 2, 4]  # Hq P d, Hkv n d


def entry(shape, begin, dtype="F32"):
    n = 4 * shape[0] * shape[1] * shape[2]
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + n]}


def valid_header():
    return {"__metadata__": {"model": "tiny", "first_query": "1"},
            "l0.q": entry(Q, 0), "l0.k": entry(K, 16), "l0.v": entry(K, 48)}


def capture(header, data=b"\0" * 80, raw=None):
    text = raw if raw is not None else json.dumps(header).encode()
    text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + data


def with_change(change):
    h = valid_header()
    change(h)
    return capture(h)


write("capture", "too_short.safetensors", b"\x10\x00\x00")
write("capture", "header_length_2e40.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
write("capture", "header_not_json.safetensors", capture(None, raw=b'{"__metadata__": {'))
write("capture", "header_with_nul.safetensors",
      capture(None, raw=b'{"__metadata__": {"model": "t\\u0000x", "first_query": "1"}}'))
write("capture", "duplicate_key.safetensors",
      capture(None, raw=b'{"__metadata__": {"model": "a", "model": "b", "first_query": "1"}}'))
write("capture", "no_metadata.safetensors", with_change(lambda h: h.pop("__metadata__")))
write("capture", "no_first_query.safetensors",
      with_change(lambda h: h["__metadata__"].pop("first_query")))
write("capture", "first_query_past_n.safetensors",
      with_change(lambda h: h["__metadata__"].update(first_query="2")))
write("capture", "first_query_not_decimal.safetensors",
      with_change(lambda h: h["__metadata__"].update(first_query="0x1")))
write("capture", "missing_values.safetensors", with_change(lambda h: h.pop("l0.v")))
write("capture", "unknown_dtype.safetensors",
      with_change(lambda h: h.update({"l0.k": entry(K, 16, "I8")})))
write("capture", "size_mismatch.safetensors",
      with_change(lambda h: h["l0.k"].update(data_offsets=[16, 40])))
write("capture", "overlapping.safetensors",
      with_change(lambda h: h.update({"l0.v": entry(K, 20)})))
write("capture", "offsets_past_end.safetensors",
      with_change(lambda h: h.update({"l0.v": entry(K, 64)})))
h = valid_header()
h.update({"l0.k": entry([2, 2, 4], 16), "l0.v": entry([2, 2, 4], 80)})
write("capture", "kv_heads_not_dividing.safetensors", capture(h, data=b"\0" * 144))

# ---- method lists -------------------------------------------------------
for name, text in [("unknown", "fathom:48,bogus:3"), ("empty_item", "fathom:48,,ds:32"),
                   ("no_parameter", "sparq"), ("zero", "fathom:0"),
                   ("too_large", "ds:99999999999"), ("not_decimal", "loki:0x20"),
                   ("parameter_on_dense", "dense:4"), ("uppercase", "FATHOM:48"),
                   ("only_commas", ","), ("too_long", "fathom:" + "0" * 40 + "48")]:
    write("methods", name + ".txt", text)

# ---- synthetic preset files ----------------------------------------------
def valid_preset():
    """A well-formed preset file with d = 8 (fuzz/corpus/synth_preset/ holds it)."""
    return {"format": "fathom-synth-preset-1", "name": "tiny-fit", "layers": 2, "kv_heads": 1, "group": 2,
            "dim": 8, "rope_base": 10000.0, "qk_norm": False, "key_scale": 2.0, "scale_spread": 0.3,
            "low_freq_boost": 4.0, "outlier_mean": 0.0, "background_logit": 1.0, "topic_logit": 3.0,
            "sink_logit": 12.0, "content_cap": 2.5, "topics": 8, "topic_amp": 2.0, "recency_logit": 0.0,
            "query_run": 4, "k_std": [1.0] * 8, "k_mean": [0.5] * 8, "q_std": [1.0] * 8, "q_mean": [2.0] * 8}


def preset(change):
    p = valid_preset()
    change(p)
    return json.dumps(p)


for name, text in [
        ("not_json", '{"format": "fathom-synth-preset-1", '),
        ("not_object", "[1, 2]"),
        ("wrong_format", preset(lambda p: p.update(format="fathom-synth-preset-0"))),
        ("unknown_key", preset(lambda p: p.update(topic_logits=3.0))),
        ("missing_dim", preset(lambda p: p.pop("dim"))),
        ("dim_as_string", preset(lambda p: p.update(dim="8"))),
        ("dim_2e32", preset(lambda p: p.update(dim=2 ** 32 - 1))),
        ("dim_not_multiple_of_8", preset(lambda p: p.update(dim=12))),
        ("profile_too_short", preset(lambda p: p.update(k_std=[1.0] * 7))),
        ("profile_not_numbers", preset(lambda p: p.update(q_mean=[1.0] * 7 + ["x"]))),
        ("negative_std", preset(lambda p: p["k_std"].__setitem__(3, -1.0))),
        ("huge_number", preset(lambda p: p.update(topic_logit=1e300))),
        ("layers_1e6", preset(lambda p: p.update(layers=1000000))),
        ("group_9", preset(lambda p: p.update(group=9))),
        ("topics_5", preset(lambda p: p.update(topics=5))),
        ("name_too_long", preset(lambda p: p.update(name="n" * 64))),
        ("query_run_0", preset(lambda p: p.update(query_run=0))),
        ("qk_norm_not_bool", preset(lambda p: p.update(qk_norm=1))),
        ("duplicate_key", preset(lambda p: None).replace('"layers": 2,', '"layers": 2, "layers": 3,')),
        ("topic_logit_layers_too_short", preset(lambda p: p.update(topic_logit_layers=[3.0]))),
        ("topic_logit_layers_zero", preset(lambda p: p.update(topic_logit_layers=[3.0, 0.0]))),
        ("topic_logit_layers_not_numbers", preset(lambda p: p.update(topic_logit_layers=[3.0, "x"]))),
        ("query_churn_out_of_range", preset(lambda p: p.update(query_churn=5.0))),
        ("query_churn_not_number", preset(lambda p: p.update(query_churn="wide")))]:
    write("preset", name + ".json", text)


def heads_preset(change):
    """Format 2 with per-head profiles (2 layers x 1 KV head x group 2, d = 8), changed."""
    p = valid_preset()
    p.update(format="fathom-synth-preset-2", pos_gain=1.0, pos_re=[0.5] * 4, pos_im=[0.0] * 4,
             heads={"k_std": [1.0] * 16, "k_mean": [0.5] * 16, "pos_re": [0.3] * 16, "pos_im": [0.0] * 16})
    change(p)
    return json.dumps(p)


for name, text in [
        ("heads_in_format_1", heads_preset(lambda p: p.update(format="fathom-synth-preset-1"))),
        ("heads_without_pos", heads_preset(lambda p: [p.pop(k) for k in ("pos_gain", "pos_re", "pos_im")])),
        ("heads_not_object", heads_preset(lambda p: p.update(heads=[1.0]))),
        ("heads_unknown_key", heads_preset(lambda p: p["heads"].update(k_sd=[1.0]))),
        ("heads_missing_pos_im", heads_preset(lambda p: p["heads"].pop("pos_im"))),
        ("heads_too_short", heads_preset(lambda p: p["heads"].update(k_std=[1.0] * 15))),
        ("heads_too_long", heads_preset(lambda p: p["heads"].update(pos_re=[0.3] * 17))),
        ("heads_negative_std", heads_preset(lambda p: p["heads"]["k_std"].__setitem__(3, -1.0))),
        ("heads_pos_out_of_range", heads_preset(lambda p: p["heads"]["pos_im"].__setitem__(5, 1e9))),
        ("heads_not_numbers", heads_preset(lambda p: p["heads"]["k_mean"].__setitem__(0, "x"))),
        ("heads_too_many", heads_preset(lambda p: p.update(layers=4096, kv_heads=1024, group=8))),
        ("heads_q_std_too_short", heads_preset(lambda p: p["heads"].update(q_std=[1.0] * 31))),
        ("heads_q_std_zero", heads_preset(lambda p: p["heads"].update(q_std=[1.0] * 5 + [0.0] + [1.0] * 26))),
        ("heads_q_std_not_numbers", heads_preset(lambda p: p["heads"].update(q_std=["x"] + [1.0] * 31)))]:
    write("preset", name + ".json", text)
os.makedirs(os.path.join(HERE, "..", "..", "..", "fuzz", "corpus", "synth_preset"), exist_ok=True)
with open(os.path.join(HERE, "..", "..", "..", "fuzz", "corpus", "synth_preset", "valid.json"), "w") as f:
    f.write(json.dumps(valid_preset()))
with open(os.path.join(HERE, "..", "..", "..", "fuzz", "corpus", "synth_preset", "valid_heads.json"), "w") as f:
    f.write(heads_preset(lambda p: None))
