"""Converts a Kakeya test checkpoint (internal/testmodel) to GGUF with
llama.cpp's own convert_hf_to_gguf.py, for the parity tests.

    python3 convert.py LLAMA_CPP_DIR MODEL_DIR TEXT OUT.gguf [OUTTYPE]

A seeded checkpoint has no tokenizer, which the converter needs: this
trains a SentencePiece model of the checkpoint's vocab_size (at most 512;
the converter pads a larger vocabulary with [PAD] tokens) on TEXT (byte
fallback, Gemma's special ids: pad 0, eos 1, bos 2, unk 3) into
MODEL_DIR/tokenizer.model first. The tests feed token ids, so the
tokenizer only has to be one the converter and llama.cpp accept.
Weights are written as OUTTYPE, f32 by default (the checkpoint's BF16
widens exactly); bf16 for the benchmark shapes.

Debian's python3-torch (1.13) predates some dtypes the converter names
in a table (float8, unsigned ints): they are given placeholder values,
which no tensor of these checkpoints has. transformers, which Debian does
not package, is the stand-in in pystub/ (see there).
"""
import json
import os
import runpy
import sys

import sentencepiece as spm
import torch


def main():
    llama, model, text, out = sys.argv[1:5]
    outtype = sys.argv[5] if len(sys.argv) > 5 else "f32"
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    vocab = cfg.get("text_config", cfg)["vocab_size"]
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=os.path.join(model, "tokenizer"), vocab_size=min(vocab, 512),
        model_type="bpe", byte_fallback=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        input_sentence_size=20000, shuffle_input_sentence=False, minloglevel=2)
    os.remove(os.path.join(model, "tokenizer.vocab"))
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "uint16", "uint32", "uint64"):
        if not hasattr(torch, name):
            setattr(torch, name, ("placeholder", name))
    sys.path.insert(0, os.environ.get("KAKEYA_PYSTUB") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "pystub"))
    sys.path.insert(0, llama)
    sys.argv = ["convert_hf_to_gguf.py", model, "--outtype", outtype, "--outfile", out]
    runpy.run_path(os.path.join(llama, "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
