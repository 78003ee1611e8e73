import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * What "safe by construction" means in the dashboard's source, checked on the files as shipped:
 * no HTML parsing of data, no inline code or style for the CSP to allow, no writes but POST.
 */
describe('dashboard assets', () => {
  const dir = join(__dirname, '../../../lib/admin/ui/assets');
  const script = readFileSync(join(dir, 'dashboard.js'), 'utf8');
  const html = readFileSync(join(dir, 'dashboard.html'), 'utf8');
  const css = readFileSync(join(dir, 'dashboard.css'), 'utf8');

  it('never parses HTML or code from strings in the script', () => {
    for (const sink of [
      'innerHTML',
      'outerHTML',
      'insertAdjacentHTML',
      'document.write',
      'createContextualFragment',
      'DOMParser',
      'eval(',
      'new Function',
      'srcdoc',
    ]) {
      expect([sink, script.includes(sink)]).toEqual([sink, false]);
    }
    // Timers only with a function, never a string to evaluate: one setTimeout, in sleep().
    expect(script.match(/set(Timeout|Interval)\(/g)).toEqual(['setTimeout(']);
    expect(script).toContain('window.setTimeout(resolve, ms)');
    // Attributes only from a fixed list that has neither style nor event handlers.
    const allowed = /const ATTRIBUTES = new Set\(\[([\s\S]*?)\]\)/.exec(script)?.[1] ?? '';
    expect(allowed).not.toMatch(/'style'|'on|'src'|'srcdoc'|'action'|'formaction'/);
    expect(script.match(/setAttribute\(/g)).toHaveLength(1);
  });

  it('changes state only with POST, to the API routes', () => {
    const methods = [...script.matchAll(/call\('([A-Z]+)'/g)].map((m) => m[1]);
    expect(new Set(methods)).toEqual(new Set(['GET', 'POST']));
    const posts = [...script.matchAll(/call\('POST', ([^,]+)/g)].map((m) => m[1]);
    expect(posts.length).toBeGreaterThan(0);
    for (const target of posts) expect(target).toMatch(/^'dead-letters\/|^'dead-letters\/' \+/);
  });

  it('has no inline script, style or event handler in the page', () => {
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts).toHaveLength(1);
    expect(scripts[0][1]).toContain('src="ui/dashboard.js"');
    expect(scripts[0][2].trim()).toBe('');
    expect(html).not.toMatch(/<style\b/i);
    expect(html).not.toMatch(/\sstyle=/i);
    expect(html).not.toMatch(/\son[a-z]+=/i);
    expect(html).not.toMatch(/javascript:/i);
  });

  it('loads nothing from another host (works offline)', () => {
    for (const text of [script, html, css]) {
      expect(text).not.toMatch(/https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
      expect(text).not.toMatch(/@import|url\(/);
    }
  });
});
