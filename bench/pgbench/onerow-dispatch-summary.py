#!/usr/bin/env python3
"""Run 15 (b): events/s per variant and per-round ratios to schema 3 from onerow-dispatch.sh's log."""
import json, re, statistics, sys
from collections import defaultdict
eps = defaultdict(dict)
stm = defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r'retained (\d+) round (\d+) (\{.*\})', line)
    if m:
        j = json.loads(m[3])
        eps[(int(m[1]), int(m[2]))][j['variant']] = j['eps']
        stm[(int(m[1]), j['variant'])].append(j['statements'] / (j['delivered'] / 100))
for retained in sorted({r for r, _ in eps}):
    rounds = sorted(k for k in eps if k[0] == retained)
    print(f'retained={retained}')
    for v in ('s3', 'l1', 'l2'):
        vals = [eps[k][v] for k in rounds]
        print(f'  {v}: events/s {min(vals)}–{max(vals)} median {statistics.median(vals):.0f} ({", ".join(map(str, vals))}); statements per 100: {statistics.median(stm[(retained, v)]):.2f}')
    for v in ('l1', 'l2'):
        r = [eps[k][v] / eps[k]['s3'] for k in rounds]
        print(f'  {v}/s3: median {statistics.median(r):.2f} ({", ".join(f"{x:.2f}" for x in r)})')
if len({r for r, _ in eps}) == 2:
    for v in ('s3', 'l1', 'l2'):
        a = statistics.median([eps[k][v] for k in eps if k[0] > 0]); b = statistics.median([eps[k][v] for k in eps if k[0] == 0])
        print(f'{v} retained/none: {a / b:.2f}')
