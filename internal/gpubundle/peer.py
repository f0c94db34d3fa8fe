#!/usr/bin/env python3
"""peer.py MODEL_DIR SHAPE: the same seeded checkpoint through Hugging Face
transformers on the GPU, as the GPU report's side-by-side row (run.sh's
peer-* steps). No network and no weights beyond MODEL_DIR: the model is
loaded from the directory kakeya-testmodel wrote, in bf16 with SDPA
attention, and fed random token ids (the tokenizer is not needed).

Measures, each the median of 3 timed runs after a warm-up:
  prefill 512      one sequence of 512 tokens, one forward pass
  decode after 512 one sequence, 32 greedy steps after a 512-token prefill
  batched decode   16 sequences of 128 tokens, 32 greedy steps together

Prints one line per figure, tab-separated: name, text, JSON fields (for
run.sh's row). Exit status 3 with one line "SKIP<TAB>reason" when torch,
transformers or a CUDA device is missing; 1 on a failure.
"""

import json
import statistics
import sys
import time


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir, shape = sys.argv[1], sys.argv[2]
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"SKIP\tnot run: {e.name or e} is not installed for {sys.executable}")
        return 3
    if not torch.cuda.is_available():
        print(f"SKIP\tnot run: torch {torch.__version__} sees no CUDA device")
        return 3
    from transformers import AutoModelForCausalLM

    dev = torch.device("cuda")
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.to(dev).eval()
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1)
    versions = f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name(0)}"

    def ids(batch, n):
        return torch.randint(0, vocab, (batch, n), generator=gen).to(dev)

    def timed(fn, reps=3):
        fn()  # warm-up
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    steps = 32

    @torch.inference_mode()
    def prefill(x):
        return model(input_ids=x, use_cache=True)

    @torch.inference_mode()
    def decode(x):
        out = model(input_ids=x, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def emit(name, text, **fields):
        fields.update(shape=shape, peer="transformers", dtype="bf16", attention="sdpa", versions=versions)
        print(f"{name}\t{text}\t{json.dumps(fields)[1:-1]}", flush=True)

    x = ids(1, 512)
    t = timed(lambda: prefill(x))
    emit(f"{shape} prefill 512", f"{512 / t:.0f} tok/s ({versions})", tokens=512, prefill_tps=512 / t, seconds=t)

    decode(x)  # warm-up
    t = statistics.median(decode(x) for _ in range(3))
    emit(f"{shape} decode after 512", f"{steps / t:.1f} tok/s, 1 sequence, {steps} steps", ctx=512, steps=steps, decode_tps=steps / t)

    xb = ids(16, 128)
    decode(xb)
    t = statistics.median(decode(xb) for _ in range(3))
    emit(f"{shape} batched decode 16", f"{16 * steps / t:.1f} tok/s aggregate, 16 sequences of 128 tokens, {steps} steps",
         batch=16, ctx=128, steps=steps, decode_tps=16 * steps / t)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a failure is a row, not a traceback alone
        print(f"FAIL\t{type(e).__name__}: {e}")
        sys.exit(1)
