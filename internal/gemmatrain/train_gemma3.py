# Trains a tiny Gemma-3-architecture model for evaluating the KV codecs on
# a Gemma checkpoint with language statistics (no real Gemma weights are
# reachable from the development machine): six layers, five sliding (window
# 64, RoPE base 1e4) and one full (base 1e6), q/k norms, Gemma's (1+w)
# RMSNorm before and after attention and MLP, GELU-tanh gating, the
# embedding scaled by sqrt(hidden), tied embeddings, head_dim 64, one KV
# head, ref-qwen2-6m's 4,096-token BPE vocabulary. It mirrors Hugging
# Face's modeling_gemma3 text model; Kakeya's forward pass matches it
# within 1e-6 on its checkpoints (positions past the window included).
#
#   go run ./internal/cmd/kakeya-tokids -tokenizer ../shared/models/ref-qwen2-6m -sep 4093 \
#       -o /tmp/train.u16 ../shared/data/tinystories/val.txt:0.75 ../shared/data/wikitext-2/valid.txt
#   STEPS=600 THREADS=1 /usr/bin/python3 internal/gemmatrain/train_gemma3.py /tmp/train.u16 DIR
#   cp ../shared/models/ref-qwen2-6m/tokenizer*.json DIR/
#
# Debian's python3-torch (1.13) and numpy; about 20 minutes on one core.
# Writes DIR/config.json and DIR/model.safetensors (bf16, rounded to
# nearest even); the last 20,000 ids are held out for the loss it prints.
import json, math, os, struct, sys, time
import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(1)
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
ids = np.fromfile(sys.argv[1], dtype=np.uint16).astype(np.int64)
out = sys.argv[2]
steps = int(os.environ.get("STEPS", "600"))
V, H, L, NH, NKV, D, I = 4096, 128, 6, 2, 1, 64, 512
WIN, PATTERN, SEQ, BATCH = 64, 6, 256, 8
EPS, QPA = 1e-6, 64.0
THETA_G, THETA_L = 1e6, 1e4

def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + w.float())).type_as(x)

def rope_tables(theta, n):
    inv = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D))
    f = torch.outer(torch.arange(n).float(), inv)
    e = torch.cat([f, f], -1)
    return e.cos(), e.sin()

def rot(x, cos, sin):
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin

P = {}
def param(name, *shape, std=0.02, zero=False):
    t = torch.zeros(*shape) if zero else torch.randn(*shape) * std
    P[name] = torch.nn.Parameter(t)
    return P[name]

param("model.embed_tokens.weight", V, H)
for l in range(L):
    p = f"model.layers.{l}."
    param(p + "self_attn.q_proj.weight", NH * D, H)
    param(p + "self_attn.k_proj.weight", NKV * D, H)
    param(p + "self_attn.v_proj.weight", NKV * D, H)
    param(p + "self_attn.o_proj.weight", H, NH * D, std=0.02 / math.sqrt(2 * L))
    param(p + "self_attn.q_norm.weight", D, zero=True)
    param(p + "self_attn.k_norm.weight", D, zero=True)
    param(p + "mlp.gate_proj.weight", I, H)
    param(p + "mlp.up_proj.weight", I, H)
    param(p + "mlp.down_proj.weight", H, I, std=0.02 / math.sqrt(2 * L))
    for n in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]:
        param(p + n + ".weight", H, zero=True)
param("model.norm.weight", H, zero=True)

cg, sg = rope_tables(THETA_G, SEQ)
cl, sl = rope_tables(THETA_L, SEQ)
pos = torch.arange(SEQ)
causal = pos[None, :] <= pos[:, None]
sliding = causal & (pos[:, None] - pos[None, :] < WIN)

def forward(x):
    B, T = x.shape
    h = F.embedding(x, P["model.embed_tokens.weight"]) * torch.tensor(H ** 0.5)
    for l in range(L):
        p = f"model.layers.{l}."
        full = (l + 1) % PATTERN == 0
        a = rms(h, P[p + "input_layernorm.weight"])
        q = (a @ P[p + "self_attn.q_proj.weight"].T).view(B, T, NH, D).transpose(1, 2)
        k = (a @ P[p + "self_attn.k_proj.weight"].T).view(B, T, NKV, D).transpose(1, 2)
        v = (a @ P[p + "self_attn.v_proj.weight"].T).view(B, T, NKV, D).transpose(1, 2)
        q, k = rms(q, P[p + "self_attn.q_norm.weight"]), rms(k, P[p + "self_attn.k_norm.weight"])
        c, s = (cg, sg) if full else (cl, sl)
        q, k = rot(q, c[:T], s[:T]), rot(k, c[:T], s[:T])
        k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
        sc = (q @ k.transpose(-1, -2)) * QPA ** -0.5
        m = (causal if full else sliding)[:T, :T]
        sc = sc.masked_fill(~m, float("-inf"))
        o = (sc.softmax(-1) @ v).transpose(1, 2).reshape(B, T, NH * D)
        o = o @ P[p + "self_attn.o_proj.weight"].T
        h = h + rms(o, P[p + "post_attention_layernorm.weight"])
        a = rms(h, P[p + "pre_feedforward_layernorm.weight"])
        g = F.gelu(a @ P[p + "mlp.gate_proj.weight"].T, approximate="tanh") * (a @ P[p + "mlp.up_proj.weight"].T)
        f = g @ P[p + "mlp.down_proj.weight"].T
        h = h + rms(f, P[p + "post_feedforward_layernorm.weight"])
    h = rms(h, P["model.norm.weight"])
    return h @ P["model.embed_tokens.weight"].T

opt = torch.optim.AdamW(P.values(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.05)
n = len(ids) - SEQ - 1
held = ids[-20000:]  # a held-out tail for the loss report
g = torch.Generator().manual_seed(2)
t0 = time.time()
for step in range(steps):
    lr = 3e-3 * min(1, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
    for gr in opt.param_groups:
        gr["lr"] = lr
    starts = torch.randint(0, n - 20000, (BATCH,), generator=g)
    xb = torch.stack([torch.from_numpy(ids[s : s + SEQ + 1]) for s in starts.tolist()])
    logits = forward(xb[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), xb[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(P.values(), 1.0)
    opt.step()
    if step % 50 == 0 or step == steps - 1:
        with torch.no_grad():
            hx = torch.from_numpy(held[: 8 * (SEQ + 1)].reshape(8, SEQ + 1))
            hl = F.cross_entropy(forward(hx[:, :-1]).reshape(-1, V), hx[:, 1:].reshape(-1)).item()
        print(f"step {step} loss {loss.item():.3f} held {hl:.3f} lr {lr:.2e} {time.time()-t0:.0f}s", flush=True)

os.makedirs(out, exist_ok=True)
cfg = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": V, "hidden_size": H,
       "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
       "head_dim": D, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 4096,
       "rms_norm_eps": EPS, "rope_theta": THETA_G, "rope_local_base_freq": THETA_L, "sliding_window": WIN,
       "sliding_window_pattern": PATTERN, "query_pre_attn_scalar": QPA, "tie_word_embeddings": True,
       "attn_logit_softcapping": None, "final_logit_softcapping": None, "bos_token_id": 4093, "eos_token_id": 4093,
       "pad_token_id": 4093, "torch_dtype": "bfloat16"}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
# safetensors by hand: an 8-byte header length, the JSON header, bf16 data.
header, blobs, off = {}, [], 0
for name, t in P.items():
    b = t.detach().float().contiguous().view(torch.int32)
    b16 = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).to(torch.int16).numpy().tobytes()  # round to nearest even
    header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(b16)]}
    blobs.append(b16)
    off += len(b16)
hj = json.dumps(header).encode()
hj += b" " * ((8 - len(hj) % 8) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)))
    f.write(hj)
    for b in blobs:
        f.write(b)
print("wrote", out)
