#!/usr/bin/env python3
"""Run 18: per variant and key count, medians of hot-dispatch.sh logs and per-round ratios to a.
   hot-summary.py log [log…] (rounds of different logs are kept apart)"""
import json, re, statistics as st, sys
from collections import defaultdict
runs = defaultdict(dict)  # (keys, log, round) -> variant -> json
loads = []
for n, path in enumerate(sys.argv[1:]):
    for line in open(path):
        m = re.match(r'keys (\d+) round (\d+) load ([\d.]+) (\{.*\})', line)
        if m:
            j = json.loads(m[4])
            runs[(int(m[1]), n, int(m[2]))][j['variant']] = j
            loads.append(float(m[3]))
med = st.median
if loads:
    print(f'load average {min(loads)}–{max(loads)}')
for keys in sorted({k for k, _, _ in runs}):
    rounds = [r for r in runs if r[0] == keys]
    variants = sorted({v for r in rounds for v in runs[r]}, key=lambda v: (v != 'a', v))
    print(f'keys={keys}')
    print('  variant | rounds | events/s median (range) | ÷ a per round median (range) | backend CPU µs/event median (range) | ÷ a | WAL B/event (no FPI) | HOT % | pages after')
    for v in variants:
        rs = [r for r in rounds if v in runs[r]]
        js = [runs[r][v] for r in rs]
        eps = [j['eps'] for j in js]
        cpu = [j['cpuUsPerEvent'] for j in js]
        wal = [j['walPerEvent'] for j in js if j['walPerEvent'] > 0]
        walx = [j['walNoFpiPerEvent'] for j in js if j['walPerEvent'] > 0]
        hot = [100 * j['hot'] / j['upd'] for j in js]
        pages = [j['pages'] for j in js]
        pair = [r for r in rs if 'a' in runs[r]]
        re_ = [runs[r][v]['eps'] / runs[r]['a']['eps'] for r in pair]
        rc = [runs[r][v]['cpuUsPerEvent'] / runs[r]['a']['cpuUsPerEvent'] for r in pair]
        print(f'  {v} | {len(js)} | {med(eps):.0f} ({min(eps)}–{max(eps)}) | {med(re_):.2f} ({min(re_):.2f}–{max(re_):.2f}) | '
              f'{med(cpu):.1f} ({min(cpu)}–{max(cpu)}) | {med(rc):.2f} ({min(rc):.2f}–{max(rc):.2f}) | '
              f'{med(wal):.0f} ({med(walx):.0f}) | {med(hot):.0f} | {med(pages):.0f}')

# hot-append.sh lines: tps per variant and clients, per-round ratio to a.
app = defaultdict(dict)  # (log, sync, round, clients) -> variant -> (tps, wal, pages)
for n, path in enumerate(sys.argv[1:]):
    for line in open(path):
        m = re.match(r'sync (\S+) round (\d+) clients (\d+) (\S+) tps ([\d.]+) events \d+ deliveries_pages (\d+) wal_per_tx (\d+)', line)
        if m:
            app[(n, m[1], int(m[2]), int(m[3]))][m[4]] = (float(m[5]), int(m[7]), int(m[6]))
if app:
    print('append (pgbench): tps median (range), ÷ a per round median (range), WAL B/tx (cluster), deliveries pages after')
    for sync in sorted({k[1] for k in app}):
        for clients in sorted({k[3] for k in app}):
            ks = [k for k in app if k[1] == sync and k[3] == clients]
            for v in sorted({v for k in ks for v in app[k]}, key=lambda v: (v != 'a', v)):
                t = [app[k][v][0] for k in ks if v in app[k]]
                r = [app[k][v][0] / app[k]['a'][0] for k in ks if v in app[k] and 'a' in app[k]]
                w = [app[k][v][1] for k in ks if v in app[k]]
                p = [app[k][v][2] for k in ks if v in app[k]]
                print(f'  sync {sync} clients {clients} {v}: {med(t):.0f} ({min(t):.0f}–{max(t):.0f}) | {med(r):.2f} ({min(r):.2f}–{max(r):.2f}) | {med(w):.0f} | {med(p):.0f} | n={len(t)}')

# hot-steady.sh lines.
sty = defaultdict(list)
sround = defaultdict(dict)
for n, path in enumerate(sys.argv[1:]):
    for line in open(path):
        m = re.match(r'steady round (\d+) load ([\d.]+) append_tps ([\d.]+) (\{.*\})', line)
        if m:
            j = json.loads(m[4])
            sty[j['variant']].append((float(m[3]), j))
            sround[(n, int(m[1]))][j['variant']] = j
if sty:
    print('steady: variant | append tps | delivered | HOT % | loop CPU µs/event | WAL B/event (no FPI) | claims, empty | pages after')
    for v in sorted(sty, key=lambda v: (v != 'a', v)):
        xs = sty[v]
        f = lambda g: [g(t, j) for t, j in xs]
        hot = f(lambda t, j: 100 * j['hot'] / max(j['upd'], 1))
        cpu = f(lambda t, j: j['cpuUsPerEvent'])
        print(f'  {v} | {med(f(lambda t, j: t)):.0f} | {med(f(lambda t, j: j["delivered"])):.0f} | {med(hot):.0f} ({min(hot):.0f}–{max(hot):.0f}) | '
              f'{med(cpu):.1f} ({min(cpu)}–{max(cpu)}) | {med(f(lambda t, j: j["walPerEvent"])):.0f} ({med(f(lambda t, j: j["walNoFpiPerEvent"])):.0f}) | '
              f'{med(f(lambda t, j: j["claims"])):.0f}, {med(f(lambda t, j: j["empty"])):.0f} | {med(f(lambda t, j: j["pages"])):.0f} | n={len(xs)}')
    for v in sorted(sty):
        if v == 'a':
            continue
        rc = [r[v]['cpuUsPerEvent'] / r['a']['cpuUsPerEvent'] for r in sround.values() if v in r and 'a' in r]
        rw = [r[v]['walPerEvent'] / r['a']['walPerEvent'] for r in sround.values() if v in r and 'a' in r]
        print(f'  {v} ÷ a per round: CPU {med(rc):.2f} ({min(rc):.2f}–{max(rc):.2f}), WAL {med(rw):.2f} ({min(rw):.2f}–{max(rw):.2f})')
