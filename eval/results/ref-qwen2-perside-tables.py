#!/usr/bin/env python3
"""Tables of docs/results/2026-11-29-preset-perside.md from the kakeya-eval
ppl reports eval/results/ref-qwen2-perside-DOMAIN.json and
ref-qwen2-perside2-DOMAIN.json (a second run over the same passages, its
reference the same to the last digit): per configuration
pooled ΔPPL, KL and top-1 with 95% bootstrap intervals over passages
(10,000 resamples, seed 1, percentile), passages below 95% top-1 and
whether it meets the preset's bar (top-1 >= 97.5%, ΔPPL <= +0.5%); then
KL ratios of each kakeya-pc row over the KVTC-style rows at an equal or
lower whole-cache ratio, with intervals and per-passage wins. Usage, from
the repository root:

    python3 eval/results/ref-qwen2-perside-tables.py eval/results
"""
import json, math, random, sys

B = 10000
DOMAINS = [('WikiText-2 test, second half, 30 passages', 'wikitext2'),
           ('TinyStories held-out, 24 passages', 'tinystories'),
           ('Go package documentation and licences, 24 passages', 'godocs'),
           ('WikiText-2 test, first 40 passages (the earlier pages\' passages)', 'wikitext')]
PAIRS = [('pc-r2.5-hot32', 'kvtc-r2.5-hot32'),
         ('pc-r2.5-k16-hot32', 'kvtc-r2.25-hot32'), ('pc-r2.5-k16-hot32', 'kvtc-r2.5-hot32'),
         ('pc-r2.5-k16-v2.45-hot32', 'kvtc-r2.25-hot32'), ('pc-r2.5-k16-v2.4-hot32', 'kvtc-r2.25-hot32'),
         ('pc-r2.5-k15-hot32', 'kvtc-r2.25-hot32'),
         ('pc-r2.5-k14-hot32', 'kvtc-r2.1-hot32'), ('pc-r2.5-k16-v2.3-hot32', 'kvtc-r2.1-hot32'),
         ('pc-r2.5-k14-v2.4-hot32', 'kvtc-r2.1-hot32')]


def load(path):
    r = json.load(open(path))
    names = [c['config']['name'] for c in r['configs']]
    per = {n: [(p['configs'][i]['nll_sum'], p['configs'][i]['kl_sum'], p['configs'][i]['top1'], p['configs'][i]['count'])
               for p in r['passages_detail']] for i, n in enumerate(names)}
    return per, {c['config']['name']: c for c in r['configs']}


def pct(v):
    v = sorted(v)
    return v[int(0.025 * (len(v) - 1))], v[int(0.975 * (len(v) - 1))]


def stats(p, ref, idx):
    nll = sum(p[i][0] for i in idx); kl = sum(p[i][1] for i in idx)
    t = sum(p[i][2] for i in idx); c = sum(p[i][3] for i in idx)
    rn = sum(ref[i][0] for i in idx)
    return kl / c, 100 * t / c, 100 * (math.exp((nll - rn) / c) - 1)


def quality_table(title, per, meta, margin=False):
    """Prints a domain's title and its quality table (one row a config, with
    bootstrap intervals; margin: the bar column says top-1's margin over
    97.5%) and returns the reference, the passage count and the bootstrap
    samples, for the tables that follow."""
    ref = per['ref']
    n = len(ref)
    rnd = random.Random(1)
    bs = [[rnd.randrange(n) for _ in range(n)] for _ in range(B)]
    rppl = math.exp(sum(x[0] for x in ref) / sum(x[3] for x in ref))
    print(f'\n**{title}** (reference PPL {rppl:.3f})\n')
    print('| config | codec ratio | cache ratio | ΔPPL (95% CI) | KL (95% CI) | top-1 (95% CI) | < 95% | '
          + ('bar (margin) |' if margin else 'bar |'))
    print('| --- | --- | --- | --- | --- | --- | --- | --- |')
    for name, m in meta.items():
        if name == 'ref':
            continue
        p = per[name]
        kl, t1, dp = stats(p, ref, range(n))
        ks, ts, ds = zip(*(stats(p, ref, b) for b in bs))
        (klo, khi), (tlo, thi), (dlo, dhi) = pct(ks), pct(ts), pct(ds)
        below = sum(1 for x in p if 100 * x[2] / x[3] < 95)
        ok = 'yes' if t1 >= 97.5 and dp <= 0.5 else 'no'
        if margin:
            ok += f' ({t1 - 97.5:+.2f})'
        print(f"| {name} | {m['codec_ratio_vs_bf16']:.2f}x | {m['kv_ratio_vs_bf16']:.2f}x | {dp:+.2f}% ({dlo:+.2f} – {dhi:+.2f}) | "
              f"{kl:.5f} ({klo:.5f} – {khi:.5f}) | {t1:.2f}% ({tlo:.2f} – {thi:.2f}) | {below} | {ok} |")
    return ref, n, bs


def main():
    d = sys.argv[1]
    for title, key in DOMAINS:
        per, meta = load(f'{d}/ref-qwen2-perside-{key}.json')
        per2, meta2 = load(f'{d}/ref-qwen2-perside2-{key}.json')
        assert per2['ref'] == per['ref'], key
        per.update(per2)
        meta.update({k: v for k, v in meta2.items() if k != 'ref'})
        ref, n, bs = quality_table(title, per, meta)
        print('\nKL of A over B (pooled, 95% bootstrap interval; wins: passages where A\'s KL is lower)\n')
        print('| A (cache ratio) | B (cache ratio) | KL ratio (95% CI) | wins |')
        print('| --- | --- | --- | --- |')
        for a, b in PAIRS:
            pa, pb = per[a], per[b]
            f = lambda idx: sum(pa[i][1] for i in idx) / sum(pb[i][1] for i in idx)
            lo, hi = pct([f(x) for x in bs])
            wins = sum(1 for i in range(n) if pa[i][1] < pb[i][1])
            print(f"| {a} ({meta[a]['kv_ratio_vs_bf16']:.2f}x) | {b} ({meta[b]['kv_ratio_vs_bf16']:.2f}x) | {f(range(n)):.2f} ({lo:.2f}–{hi:.2f}) | {wins}/{n} |")


if __name__ == '__main__':
    main()
