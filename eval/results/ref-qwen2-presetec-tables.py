#!/usr/bin/env python3
"""Tables of docs/results/2026-11-29-preset-ec.md from the kakeya-eval ppl
reports eval/results/ref-qwen2-presetec{,2,3}-DOMAIN.json (runs over the
passages of the block-32 and per-side pages), beside the preset's row and
the block-64 KVTC-style rows of ref-qwen2-block32d-DOMAIN.json and
ref-qwen2-perside-DOMAIN.json (the same passages, the reference the same to
the last digit). The tables are the block-32 page's (its script's
`tables`): pooled ΔPPL, KL and top-1 with 95% bootstrap intervals over
passages (10,000 resamples, seed 1, percentile), passages below 95% top-1,
the bar (top-1 >= 97.5%, ΔPPL <= +0.5%) and its margin, then each row's KL
over the KVTC-style row of the highest whole-cache ratio not above its own.
Usage, from the repository root:

    python3 eval/results/ref-qwen2-presetec-tables.py eval/results
"""
import importlib, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_block32 = importlib.import_module('ref-qwen2-block32-tables')

SETS = ['presetec', 'presetec2', 'presetec3']
# The preset (5-bit keys, values at rate 2.5) and values at 2.4 at blocks
# of 64, with the KVTC-style rows at blocks of 64 of the block-32 page.
BLOCK32D = ['b64h32-k16mb5-v2.5', 'b64h32-k16mb5-v2.4', 'kvtc-b64h32-r2', 'kvtc-b64h32-r1.9']
PERSIDE = ['kvtc-r2.5-hot32', 'kvtc-r2.25-hot32', 'kvtc-r2.1-hot32']


def main():
    d = sys.argv[1]
    domains = _block32.DOMAINS
    # Every kakeya-pc row is set against the KVTC-style baseline.
    paired = ['b64h32-k16mb5-v2.5', 'b64h32-k16mb5-v2.4']
    for s in SETS:
        f = f'{d}/ref-qwen2-{s}-{domains[0][1]}.json'
        if os.path.exists(f):
            paired += [c['config']['name'] for c in json.load(open(f))['configs']
                       if c['config']['name'] != 'ref' and not c['config']['name'].startswith('kvtc')]
    _block32.tables(d, SETS, paired, [('block32d', BLOCK32D), ('perside', PERSIDE)], domains)


if __name__ == '__main__':
    main()
