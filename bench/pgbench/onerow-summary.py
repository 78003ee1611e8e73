#!/usr/bin/env python3
"""Run 15 (a): per-round ratios to the hand-rolled INSERT and their medians from onerow-append.sh's log."""
import re, statistics, sys
from collections import defaultdict
tps = defaultdict(dict)  # (sync, clients, round) -> variant -> tps
for line in open(sys.argv[1]):
    m = re.match(r'sync (\w+) round (\d+) clients (\d+) (\w+) tps ([\d.]+)', line)
    if m:
        tps[(m[1], int(m[3]), int(m[2]))][m[4]] = float(m[5])
for sync in ('on', 'off'):
    for clients in (1, 8):
        rounds = sorted(r for (s, c, r) in tps if s == sync and c == clients)
        if not rounds:
            continue
        print(f'synchronous_commit={sync} clients={clients}')
        for v in ('raw', 'ours3', 'ours1', 'ours1h'):
            vals = [tps[(sync, clients, r)].get(v) for r in rounds]
            print(f'  {v:7} tps {min(vals):8.0f}–{max(vals):8.0f} median {statistics.median(vals):8.0f}')
        for v, base in (('ours3', 'raw'), ('ours1', 'raw'), ('ours1h', 'raw'), ('ours1', 'ours3')):
            ratios = [tps[(sync, clients, r)][v] / tps[(sync, clients, r)][base] for r in rounds]
            print(f'  {v}/{base}: median {statistics.median(ratios):.2f} ({", ".join(f"{x:.2f}" for x in ratios)})')
