#!/usr/bin/env python3
"""Reference encodings for the tokenizer corpus test.

Builds the REFERENCE tokenizer with Hugging Face `tokenizers` from a GGUF
file's vocabulary and merges (BPE model; pre-tokenizer as SmolLM2's
tokenizer.json: Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)]; ByteLevel decoder;
control tokens as special added tokens), encodes a corpus and writes:

  OUT/vocab.bin   the GGUF tokenizer metadata, for libfathom to build from
  OUT/cases.bin   each case: text, parse_special, reference ids, reference decode

Both files are little-endian and length-prefixed (see tests/test_tokenizer_corpus.c).

usage: tokenizer_reference.py MODEL.gguf CORPUS_DIR OUT_DIR
"""
import os
import random
import struct
import sys
import unicodedata

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CONTROL = 3


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return f.contents() if f is not None else default


def build_reference(tokens, types, merges):
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(tokens, types) if ty == CONTROL])
    return tk


def corpus(corpus_dir):
    """(text, parse_special) pairs: files whole and line by line, hand-picked
    strings, seeded random strings and a sweep of Unicode planes 0 and 1."""
    cases = []
    for name in sorted(os.listdir(corpus_dir)):
        with open(os.path.join(corpus_dir, name), encoding="utf-8", newline="") as f:
            text = f.read()
        for special in (True, False):
            cases.append((text, special))
            cases.extend((line, special) for line in text.splitlines(keepends=True))
    picked = [
        "", " ", "  ", "\n", "\t", "a", " a", "a ", "  a  ", "Hello world", "Hello  world ",
        "12345 3.14159", "1 2  3   4", "x1y22z333", " 007", "v1.2.3-rc4", "0x1F", "१२३ ٤٥٦ ௧௨",
        "don't I'll we've they're she's he'd you'll I'M DON'T", "'s 't 're 've 'm 'll 'd",
        "''s ' s", "rock'n'roll", "a  b   c\n\n\n  d", "line\r\nnext\r\n", "\n\n\n", " \n \n ",
        "end with spaces   ", "   start with spaces", "tabs\t\t\tand\tmore\t", "\u00a0\u00a0x",
        "a\u2028b\u2029c\u0085d", "x\u180ey", "a\u180e\u180e!", " \u180e.", ".\u180e \u180e  x", "\u180e\n", "x\u200by\u200dz", "\u3000\u3000全角", "\x00nul\x01", "ctl\x04\x06(\x13(\x1d end", "\x04",
        "é e\u0301 ñ n\u0303", "👍🏽 👨\u200d👩\u200d👧", "🇯🇵🇫🇷", "日本語テキスト", "한국어",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>\n",
        "<|im_start|<|im_start|>>", "<|im_start|><|im_start|>", "text<|endoftext|>text",
        " <|im_end|> ", "<reponame><repo_name>", "<|im_", "im_start|>",
        " " * 300, "\n" * 100 + "x", "\t " * 50, "a" * 500, "ab" * 300, "1234567890" * 20,
        "=" * 200, "-" * 99 + ">", "\u00e9" * 100, "\u4e2d" * 100, "\U0001F600" * 50,
    ]
    for text in picked:
        cases.append((text, True))
        cases.append((text, False))
    rng = random.Random(20261129)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " ", "  \t\n\r\u00a0\u3000\u2003\u2028\u0085\u180e\u200b",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "'sdtmlrev",
        "éèêëàâäôöûüçñßøåæœÉÀÇ", "\u0301\u0300\u0308\u0327\u0303\u20d7",
        "αβγδεζηθλμπσω", "абвгдежзийклмн", "你好世界中文字", "ひらがなカタカナ", "한국어텍스트",
        "١٢٣٤٥٦٧٨٩٠०१२३", "½¾²³Ⅻⅷ①⑩", "😀🎉👍🏽👨‍👩🇫🇷❤️🤖", "→∑∞≠√∀∃", "𝔸𝔹ℂ𝟘𝟙𝟚",
    ]
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>"]
    for i in range(2000):
        parts = []
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.03:
                parts.append(rng.choice(specials))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        cases.append(("".join(parts), i % 2 == 0))
    # Every assigned code point of planes 0 and 1 in contexts where its class
    # (letter, number, space, other) decides the split. "Assigned" by Python's
    # Unicode database: libfathom's classes come from PCRE2's tables (Unicode
    # 14 in Debian 12's 10.42) and tokenizers 0.23 has Unicode 16, so the
    # 9,405 code points assigned since then as letters or numbers split
    # differently (see include/fathom.h).
    cps = [c for c in range(0x20000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    for start in range(0, len(cps), 64):
        chunk = []
        for c in cps[start:start + 64]:
            ch = chr(c)
            chunk.append(f"x{ch}{ch}y {ch}1{ch} {ch}!{ch}\t{ch}  {ch}")
        cases.append(("\n".join(chunk), False))
    return cases


def pack_str(data):
    return struct.pack("<I", len(data)) + data


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_path, corpus_dir, out_dir = sys.argv[1:]
    reader = GGUFReader(model_path)
    tokens = list(field(reader, "tokenizer.ggml.tokens"))
    types = list(field(reader, "tokenizer.ggml.token_type"))
    merges = list(field(reader, "tokenizer.ggml.merges"))
    pre = field(reader, "tokenizer.ggml.pre", "default")
    model = field(reader, "tokenizer.ggml.model")
    bos = field(reader, "tokenizer.ggml.bos_token_id", -1)
    eos = field(reader, "tokenizer.ggml.eos_token_id", -1)
    add_bos = bool(field(reader, "tokenizer.ggml.add_bos_token", False))
    if model != "gpt2" or pre != "smollm" or add_bos:
        sys.exit(f"reference: expected a gpt2/smollm tokenizer without bos, got "
                 f"{model}/{pre} add_bos={add_bos}")
    tk = build_reference(tokens, types, merges)

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.bin"), "wb") as f:
        f.write(b"FTOKVOC1")
        f.write(pack_str(model.encode()) + pack_str(pre.encode()))
        f.write(struct.pack("<iiI", int(bos), int(eos), int(add_bos)))
        f.write(struct.pack("<I", len(tokens)))
        for t, ty in zip(tokens, types):
            f.write(struct.pack("<i", int(ty)) + pack_str(t.encode("utf-8")))
        f.write(struct.pack("<I", len(merges)))
        for m in merges:
            f.write(pack_str(m.encode("utf-8")))

    cases = corpus(corpus_dir)
    encodings = {}
    for special in (True, False):
        tk.encode_special_tokens = not special
        texts = [t for t, s in cases if s == special]
        for text, enc in zip(texts, tk.encode_batch(texts, add_special_tokens=False)):
            encodings[(text, special)] = enc.ids
    n_ids = 0
    with open(os.path.join(out_dir, "cases.bin"), "wb") as f:
        f.write(b"FTOKCAS1" + struct.pack("<I", len(cases)))
        for text, special in cases:
            ids = encodings[(text, special)]
            decoded = tk.decode(ids, skip_special_tokens=False)
            n_ids += len(ids)
            f.write(struct.pack("<I", int(special)) + pack_str(text.encode("utf-8")))
            f.write(struct.pack(f"<I{len(ids)}i", len(ids), *ids))
            f.write(pack_str(decoded.encode("utf-8")))
    print(f"reference: pre-tokenizer {pre}, {len(tokens)} tokens, {len(merges)} merges, "
          f"{len(cases)} cases, {n_ids} ids")


if __name__ == "__main__":
    main()
