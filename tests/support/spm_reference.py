#!/usr/bin/env python3
"""Reference encodings of a SentencePiece-style GGUF tokenizer (tokenizer.ggml.model
"llama": Gemma 3) for the tokenizer corpus test.

The REFERENCE is Google's `sentencepiece` library: a BPE ModelProto is built
from the GGUF's tokens, scores and token types (byte fallback, whitespace
escaped to U+2581, identity normalizer, no dummy prefix, as the GGUF's
add_space_prefix says) and SentencePieceProcessor encodes and decodes. Two
things are done here, outside sentencepiece, as llama.cpp does them:
  * special tokens are cut out of the raw text first (leftmost, longest):
    user-defined tokens always, control tokens when parse_special. llama.cpp
    matches them before whitespace is escaped; sentencepiece would escape
    the spaces of a user-defined token such as "  " first and never match
    it, so only the text between them goes to sentencepiece;
  * the bos token is prepended (tokenizer.ggml.add_bos_token).
Decoding: sentencepiece decodes each run of ordinary ids, special tokens
give their text.

Writes OUT/cases.bin (format: tests/test_tokenizer_corpus.c); the C test
builds its tokenizer from the GGUF itself.

usage: spm_reference.py MODEL.gguf CORPUS_DIR OUT_DIR
"""
import os
import re
import struct
import sys

import numpy as np
from gguf import GGUFReader
from sentencepiece import SentencePieceProcessor
from sentencepiece import sentencepiece_model_pb2 as pb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_reference import corpus, pack_str  # noqa: E402

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
PIECE_TYPE = {NORMAL: pb.ModelProto.SentencePiece.NORMAL, UNKNOWN: pb.ModelProto.SentencePiece.UNKNOWN,
              CONTROL: pb.ModelProto.SentencePiece.CONTROL,
              USER_DEFINED: pb.ModelProto.SentencePiece.USER_DEFINED,
              UNUSED: pb.ModelProto.SentencePiece.UNUSED, BYTE: pb.ModelProto.SentencePiece.BYTE}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return f.contents() if f is not None else default


def build_reference(tokens, scores, types, unk, add_space_prefix):
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(tokens)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id = unk
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = add_space_prefix
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for i, (t, s, ty) in enumerate(zip(tokens, scores, types)):
        p = m.pieces.add()
        p.piece, p.score = t, float(s)
        # sentencepiece needs exactly one UNKNOWN piece: the GGUF's unk id
        p.type = pb.ModelProto.SentencePiece.UNKNOWN if i == unk else PIECE_TYPE[int(ty)]
    return SentencePieceProcessor(model_proto=m.SerializeToString())


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_path, corpus_dir, out_dir = sys.argv[1:]
    reader = GGUFReader(model_path)
    if field(reader, "tokenizer.ggml.model") != "llama":
        sys.exit("spm_reference: expected tokenizer.ggml.model llama")
    tokens = list(field(reader, "tokenizer.ggml.tokens"))
    scores = np.asarray(field(reader, "tokenizer.ggml.scores"), dtype=np.float32)
    types = list(field(reader, "tokenizer.ggml.token_type"))
    bos = int(field(reader, "tokenizer.ggml.bos_token_id"))
    unk = int(field(reader, "tokenizer.ggml.unknown_token_id"))
    add_bos = bool(field(reader, "tokenizer.ggml.add_bos_token", False))
    add_space_prefix = bool(field(reader, "tokenizer.ggml.add_space_prefix", True))
    if add_space_prefix:
        sys.exit("spm_reference: add_space_prefix is not handled (sentencepiece adds one space "
                 "per text, llama.cpp one per fragment)")
    sp = build_reference(tokens, scores, types, unk, add_space_prefix)
    special = {t: i for i, (t, ty) in enumerate(zip(tokens, types))
               if int(ty) in (CONTROL, USER_DEFINED, UNKNOWN) and t}
    always = [t for t, i in special.items() if int(types[i]) == USER_DEFINED]

    def splitter(names):
        names = sorted(names, key=len, reverse=True)  # alternation: first = longest
        return re.compile("|".join(re.escape(n) for n in names))

    split_on = {True: splitter(special), False: splitter(always)}

    def encode(text, parse_special):
        ids = [bos] if add_bos else []
        at = 0
        for m in split_on[parse_special].finditer(text):
            if m.start() > at:
                ids += sp.encode(text[at:m.start()])
            ids.append(special[m.group()])
            at = m.end()
        if at < len(text):
            ids += sp.encode(text[at:])
        return ids

    special_ids = set(special.values())

    def decode(ids):
        out, run = [], []
        for i in ids + [None]:
            if i is None or i in special_ids:
                if run:
                    out.append(sp.decode(run))
                    run = []
                if i is not None:
                    out.append(tokens[i])
            else:
                run.append(i)
        return "".join(out)

    cases = corpus(corpus_dir)
    picked = ["<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos><eos>x",
              "a  b   c", "\t\tx\n\n\ny", "<start_of_image>", "</iframe>", "<unused0>", "<0x41>",
              "\u2581x \u2581", " \u2581 ", "[multimodal]"]
    cases += [(t, s) for t in picked for s in (True, False)]
    os.makedirs(out_dir, exist_ok=True)
    n_ids = 0
    with open(os.path.join(out_dir, "cases.bin"), "wb") as f:
        f.write(b"FTOKCAS1" + struct.pack("<I", len(cases)))
        for text, parse_special in cases:
            ids = encode(text, parse_special)
            decoded = decode(ids)
            n_ids += len(ids)
            f.write(struct.pack("<I", int(parse_special)) + pack_str(text.encode("utf-8")))
            f.write(struct.pack(f"<I{len(ids)}i", len(ids), *ids))
            f.write(pack_str(decoded.encode("utf-8")))
    print(f"spm_reference: sentencepiece BPE, {len(tokens)} tokens, {len(cases)} cases, {n_ids} ids")


if __name__ == "__main__":
    main()
