#!/usr/bin/env python3
"""Tables of docs/results/2026-11-29-preset-block32.md from the kakeya-eval
ppl reports eval/results/ref-qwen2-block32{,b,d}-DOMAIN.json (three runs
over the same passages), beside rows at blocks of 64 of
ref-qwen2-perside-DOMAIN.json (the KVTC-style baseline and the kakeya-pc
rows past the preset's ratio; the same passages, the reference the same to
the last digit): per configuration pooled ΔPPL, KL and top-1 with 95%
bootstrap intervals over passages (10,000 resamples, seed 1, percentile),
passages below 95% top-1, whether it meets the preset's bar (top-1 >=
97.5%, ΔPPL <= +0.5%) and its margin in top-1 points; then the KL ratio of
each kakeya-pc row of PAIRED over the KVTC-style row of the highest whole-cache ratio
not above its own, at blocks of 32 and at blocks of 64, with intervals and
per-passage wins. Usage, from the repository root:

    python3 eval/results/ref-qwen2-block32-tables.py eval/results
"""
import importlib, os, sys

# The per-side page's script reads the reports, takes the percentiles and
# pools the passages the same way: its functions serve both pages.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_perside = importlib.import_module('ref-qwen2-perside-tables')
load, pct, stats = _perside.load, _perside.pct, _perside.stats

DOMAINS = [('WikiText-2 test, second half, 30 passages', 'wikitext2'),
           ('TinyStories held-out, 24 passages', 'tinystories'),
           ('Go package documentation and licences, 24 passages', 'godocs'),
           ('WikiText-2 test, first 40 passages (the earlier pages\' passages)', 'wikitext')]
SETS = ['block32', 'block32b', 'block32d']
# The kakeya-pc rows set against the KVTC-style baseline.
PAIRED = ['b64h32-k16-v2.5', 'b32h16-k16-v2.5', 'b32h31-k16-v2.3', 'b64h32-k16mb5-v2.5',
          'b32h31-k16mb5-v2.5', 'b32h31-k16mb5-v2.4', 'b32h31-k16mb4-v2.5']
# Rows at blocks of 64 from ref-qwen2-perside: the KVTC-style baseline and
# the kakeya-pc rows past the preset's ratio.
PERSIDE = ['pc-r2.5-k14-hot32', 'pc-r2.5-k16-v2.3-hot32', 'pc-r2.5-k14-v2.4-hot32',
           'kvtc-r2.5-hot32', 'kvtc-r2.25-hot32', 'kvtc-r2.1-hot32']


def tables(d, sets, paired, extra, domains=DOMAINS):
    """Prints, for each of domains, the rows of the reports
    ref-qwen2-SET-DOMAIN.json of sets (a domain none of them has is left
    out), then the rows NAMES of each (SET, NAMES) of extra (the same
    passages, the reference the same to the last digit), then the KL
    ratio of each row of paired over the KVTC-style row of the highest
    whole-cache ratio not above its own, at blocks of 32 and of 64."""
    for title, key in domains:
        per, meta = {}, {}
        for s in sets:
            f = f'{d}/ref-qwen2-{s}-{key}.json'
            if not os.path.exists(f):
                continue
            p, m = load(f)
            if 'ref' in per:
                assert p['ref'] == per['ref'], (s, key)
            per.update(p)
            meta.update(m)
        if not per:
            continue
        for s, names in extra:
            p64, m64 = load(f'{d}/ref-qwen2-{s}-{key}.json')
            assert p64['ref'] == per['ref'], (s, key)
            for n in names:
                per[n], meta[n] = p64[n], m64[n]
        ref, n, bs = _perside.quality_table(title, per, meta, margin=True)
        print('\nKL of A over B, B the KVTC-style row of the highest cache ratio not above A\'s at each block size '
              '(pooled, 95% bootstrap interval; wins: passages where A\'s KL is lower)\n')
        print('| A (cache ratio) | B (cache ratio) | KL ratio (95% CI) | wins |')
        print('| --- | --- | --- | --- |')
        ratio = lambda x: meta[x]['kv_ratio_vs_bf16']
        block = lambda x: meta[x]['config']['settings']['block']
        kvtc = [x for x in meta if x.startswith('kvtc')]
        for a in paired:
            for blk in (32, 64):
                cands = [b for b in kvtc if block(b) == blk and ratio(b) <= ratio(a) + 1e-9]
                if not cands:
                    continue
                b = max(cands, key=ratio)
                pa, pb = per[a], per[b]
                f = lambda idx: sum(pa[i][1] for i in idx) / sum(pb[i][1] for i in idx)
                lo, hi = pct([f(x) for x in bs])
                wins = sum(1 for i in range(n) if pa[i][1] < pb[i][1])
                print(f"| {a} ({ratio(a):.2f}x) | {b} ({ratio(b):.2f}x) | {f(range(n)):.2f} ({lo:.2f}–{hi:.2f}) | {wins}/{n} |")


def main():
    tables(sys.argv[1], SETS, PAIRED, [('perside', PERSIDE)])


if __name__ == '__main__':
    main()
