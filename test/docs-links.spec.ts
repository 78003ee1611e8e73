import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * Every relative link of the README, the CHANGELOG and the guides in docs/ reaches a file of the
 * repository, and every `#anchor` a heading of its page (GitHub's heading ids), so a reader who
 * follows one never lands on a 404 or the top of a long page.
 */
const root = resolve(__dirname, '..');
const pages = [
  'README.md',
  'CHANGELOG.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The ids GitHub gives a page's headings (lower case, punctuation dropped, `-1` for repeats). */
function headingIds(markdown: string): Set<string> {
  const ids = new Set<string>();
  const seen = new Map<string, number>();
  const text = markdown.replace(/^```[\s\S]*?^```/gm, '');
  for (const [, heading] of text.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = heading
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\- _]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    ids.add(n === 0 ? base : `${base}-${n}`);
  }
  return ids;
}

function links(markdown: string): string[] {
  const text = markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]);
}

describe('links in the README and docs', () => {
  it.each(pages)('%s: every relative link and anchor resolves', (page) => {
    const markdown = readFileSync(join(root, page), 'utf8');
    const broken: string[] = [];
    for (const link of links(markdown)) {
      if (/^[a-z]+:/i.test(link)) continue; // http:, https:, mailto:
      const [path, anchor] = link.split('#') as [string, string | undefined];
      const target = path === '' ? join(root, page) : resolve(dirname(join(root, page)), path);
      if (!existsSync(target) || relative(root, target).startsWith('..')) {
        broken.push(`${link} (no such file)`);
        continue;
      }
      if (anchor && target.endsWith('.md') && statSync(target).isFile()) {
        if (!headingIds(readFileSync(target, 'utf8')).has(decodeURIComponent(anchor))) {
          broken.push(`${link} (no heading with that id)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});
