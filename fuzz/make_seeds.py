#!/usr/bin/env python3
"""Write the valid seeds of the fuzz targets that a malformed file cannot
reach deep enough: fuzz/corpus/model/tiny_llama.gguf, a one-layer llama
(embed 16, 2 query heads and 1 KV head of 8, ffn 32, vocab 256: the GPT-2
byte alphabet, no merges, tied output) that fathom_model_open accepts, so
fuzz_model mutates a file that gets past the header into hyper-parameter,
shape and tokenizer checks. Uses gguf-py (ggml's writer, `pip install gguf`).
Deterministic; rerun after changing it and commit the output."""
import os

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
E, HEADS, KV, D, FFN, VOCAB = 16, 2, 1, 8, 32, 256


def byte_chars():  # GPT-2 bytes_to_unicode
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def main():
    path = os.path.join(HERE, "corpus", "model", "tiny_llama.gguf")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(E)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(byte_chars())
    w.add_token_types([1] * VOCAB)
    w.add_token_merges([])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def t(name, *shape):  # numpy shape is ggml's reversed
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))

    t("token_embd.weight", VOCAB, E)
    w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(E, dtype=np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(E, dtype=np.float32))
    t("blk.0.attn_q.weight", HEADS * D, E)
    t("blk.0.attn_k.weight", KV * D, E)
    t("blk.0.attn_v.weight", KV * D, E)
    t("blk.0.attn_output.weight", E, HEADS * D)
    t("blk.0.ffn_gate.weight", FFN, E)
    t("blk.0.ffn_up.weight", FFN, E)
    t("blk.0.ffn_down.weight", E, FFN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
