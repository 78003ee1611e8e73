#!/usr/bin/env python3
"""Run 17: per-round ratios to the hand-rolled INSERT and to schema 3 (variant a), medians, from idx-append.sh's log."""
import re, statistics, sys
from collections import defaultdict
tps = defaultdict(dict)  # (sync, clients, round) -> variant -> tps
wal = defaultdict(list)
loads = []
for line in open(sys.argv[1]):
    m = re.match(r'sync (\w+) round (\d+) clients (\d+) (\w+) tps ([\d.]+) wal (\d+) load ([\d.]+)', line)
    if m:
        tps[(m[1], int(m[3]), int(m[2]))][m[4]] = float(m[5])
        wal[m[4]].append(int(m[6]))
        loads.append(float(m[7]))
ORDER = ['raw', 'a', 'b', 'c', 'm', 'bm', 'two', 'nc', 'nk']
variants = sorted({v for d in tps.values() for v in d}, key=lambda v: ORDER.index(v) if v in ORDER else 99)
print(f'load average {min(loads)}–{max(loads)}')
for v in variants:
    print(f'  WAL bytes/tx {v:4}: median {statistics.median(wal[v]):.0f}')
for sync in ('on', 'off'):
    for clients in (1, 8):
        rounds = sorted(r for (s, c, r) in tps if s == sync and c == clients)
        if not rounds:
            continue
        print(f'synchronous_commit={sync} clients={clients} rounds={len(rounds)}')
        for v in variants:
            vals = [tps[(sync, clients, r)][v] for r in rounds]
            line = f'  {v:4} tps median {statistics.median(vals):7.0f}'
            if v != 'raw':
                rr = [tps[(sync, clients, r)][v] / tps[(sync, clients, r)]['raw'] for r in rounds]
                line += f'  ÷raw {statistics.median(rr):.2f} ({", ".join(f"{x:.2f}" for x in rr)})'
            if v not in ('raw', 'a'):
                ra = [tps[(sync, clients, r)][v] / tps[(sync, clients, r)]['a'] for r in rounds]
                line += f'  ÷a {statistics.median(ra):.2f} ({", ".join(f"{x:.2f}" for x in ra)})'
            print(line)
