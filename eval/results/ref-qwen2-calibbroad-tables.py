#!/usr/bin/env python3
"""Tables of docs/results/2026-11-28-calibration-broad.md from kakeya-eval
ppl reports: per configuration pooled KL, ΔPPL and top-1 with 95%
bootstrap intervals over passages (10,000 resamples, seed 1, percentile),
passages below 95% top-1, and KL ratios of one row over another with
per-passage wins. Usage, from the repository root:

    python3 eval/results/ref-qwen2-calibbroad-tables.py eval/results \
        ref-qwen2-calibbroad-DOMAIN-builtin-old,ref-qwen2-calibbroad-DOMAIN-builtin-old-55 \
        ref-qwen2-calibbroad-DOMAIN-builtin-broad

reads DIR/NAME.json with DOMAIN each of wikitext, tinystories and godocs,
the reports before (comma-separated, merged) and after."""
import json, math, random, sys

B = 10000

def load(path):
    r = json.load(open(path))
    names = [c['config']['name'] for c in r['configs']]
    per = {}  # name -> list of (nll, kl, top1, count) per passage; 'ref' included
    for i, n in enumerate(names):
        per[n] = [(p['configs'][i]['nll_sum'], p['configs'][i]['kl_sum'], p['configs'][i]['top1'], p['configs'][i]['count']) for p in r['passages_detail']]
    meta = {c['config']['name']: c for c in r['configs']}
    return r, per, meta

def boots(npass, seed=1):
    rnd = random.Random(seed)
    return [[rnd.randrange(npass) for _ in range(npass)] for _ in range(B)]

def pct(v):
    v = sorted(v)
    return v[int(0.025 * (len(v) - 1))], v[int(0.975 * (len(v) - 1))]

def stats(per, ref, idx):
    nll = sum(per[i][0] for i in idx); kl = sum(per[i][1] for i in idx); t = sum(per[i][2] for i in idx); c = sum(per[i][3] for i in idx)
    rn = sum(ref[i][0] for i in idx)
    return kl / c, 100 * t / c, 100 * (math.exp((nll - rn) / c) - 1)

def row(label, cal, r, per, meta, name, bs):
    ref = per['ref']; p = per[name]; n = len(p)
    kl, t1, dp = stats(p, ref, range(n))
    ks, ts, ds = zip(*(stats(p, ref, b) for b in bs))
    klo, khi = pct(ks); tlo, thi = pct(ts); dlo, dhi = pct(ds)
    below = sum(1 for x in p if 100 * x[2] / x[3] < 95)
    m = meta[name]
    return f"| {label} | {cal} | {m['codec_ratio_vs_bf16']:.2f}x | {m['kv_ratio_vs_bf16']:.2f}x | {dp:+.2f}% ({dlo:+.2f} – {dhi:+.2f}) | {kl:.5f} ({klo:.5f} – {khi:.5f}) | {t1:.2f}% ({tlo:.2f} – {thi:.2f}) | {below} | {m['verdict']} |"

def ratio(pa, pb, bs):
    n = len(pa)
    f = lambda idx: sum(pa[i][1] for i in idx) / sum(pb[i][1] for i in idx)
    lo, hi = pct([f(b) for b in bs])
    wins = sum(1 for i in range(n) if pa[i][1] < pb[i][1])
    return f"{f(range(n)):.2f} ({lo:.2f}–{hi:.2f}) | {wins}/{n}"

if __name__ == '__main__':
    import itertools
    doms = [('WikiText-2 test, 40 passages', 'wikitext'), ('TinyStories held-out, 24 passages', 'tinystories'), ('Go package documentation, 24 passages', 'godocs')]
    d = sys.argv[1]
    before, after = sys.argv[2].split(','), sys.argv[3].split(',')
    ratios = []
    import os
    for title, key in doms:
        if not os.path.exists(f"{d}/{after[0].replace('DOMAIN', key)}.json"): continue
        rb = [load(f"{d}/{b.replace('DOMAIN', key)}.json") for b in before]
        ra = [load(f"{d}/{a.replace('DOMAIN', key)}.json") for a in after]
        n = len(rb[0][0]['passages_detail'])
        bs = boots(n)
        print(f"\n**{title}** (reference PPL {math.exp(sum(x[0] for x in ra[0][1]['ref'])/sum(x[3] for x in ra[0][1]['ref'])):.3f})\n")
        print("| config | calibration | codec ratio | cache ratio | ΔPPL (95% CI) | KL (95% CI) | top-1 (95% CI) | < 95% | verdict |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        pb = {}; pa = {}
        for r, per, meta in rb: pb.update({k: v for k, v in per.items() if k != 'ref'}); refb = per['ref']
        for r, per, meta in ra: pa.update({k: v for k, v in per.items() if k != 'ref'})
        metab = {}; metaa = {}
        for r, per, meta in rb: metab.update(meta)
        for r, per, meta in ra: metaa.update(meta)
        refb = rb[0][1]['ref']; refa = ra[0][1]['ref']
        for name in metaa:
            if name == 'ref': continue
            for cal, p, meta, ref in (('builtin-old', pb, metab, refb), ('builtin-broad', pa, metaa, refa)):
                if name in p:
                    print(row(name, cal, None, {name: p[name], 'ref': ref}, meta, name, bs))
        ratios.append((key, pb, pa, bs))
    print("\n**KL ratios** (pooled KL of A over B, 95% bootstrap interval over passages; wins: passages where A's KL is lower)\n")
    print("| A vs B | WikiText | wins | TinyStories | wins | Go docs | wins |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    names = [n for n in ratios[0][2]]
    for n in names:
        if all(n in x[1] for x in ratios):
            print(f"| {n}: broad vs old | " + " | ".join(ratio(pa[n], pb[n], bs) for _, pb, pa, bs in ratios) + " |")
    for a, b in [('pc-r2.5-hot32', 'kvtc-r2.5-hot32'), ('pc-r2.5-ec-hot32', 'kvtc-r2.5-hot32'), ('pc-r2-hot32', 'kvtc-r2-hot32'), ('pc-r2-ec-hot32', 'kvtc-r2-hot32'), ('pc-r1.95-hot32', 'kvtc-r1.95-hot32'), ('pc-r1.95-ec-hot32', 'kvtc-r1.95-hot32')]:
        for cal, i in (('old', 1), ('broad', 2)):
            if all(a in x[i] and b in x[i] for x in ratios):
                print(f"| {a} vs {b} ({cal}) | " + " | ".join(ratio(x[i][a], x[i][b], x[3]) for x in ratios) + " |")
