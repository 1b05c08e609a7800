import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/** The markdown files of a folder, named from the project's root. */
const markdownIn = (folder: string) => readdirSync(folder).filter((file) => file.endsWith('.md')).map((file) => `${folder}/${file}`);

/** The front door and the docs it leads to (the decision records too): every link lands, every command named exists. */
const DOCS = ['README.md', 'CONTRIBUTING.md', 'CHANGELOG.md', 'SECURITY.md', ...markdownIn('docs'), ...markdownIn('docs/decisions')];
const scripts = Object.keys((JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts);

/** GitHub's heading anchors. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = !fenced && /^#{1,6}\s+(.*)$/.exec(line);
    if (heading) anchors.add(heading[1]!.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').trim().replace(/\s/g, '-'));
  }
  return anchors;
}

describe.each(DOCS)('%s', (file) => {
  const text = readFileSync(file, 'utf8');

  it('links only to files and headings that exist', () => {
    const broken: string[] = [];
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^(https?:|mailto:)/.test(target!)) continue;
      const [relative, anchor] = target!.split('#');
      const resolved = relative ? path.join(path.dirname(file), relative) : file;
      if (!existsSync(resolved)) broken.push(target!);
      else if (anchor && resolved.endsWith('.md') && !anchorsOf(readFileSync(resolved, 'utf8')).has(anchor)) broken.push(target!);
    }
    expect(broken).toEqual([]);
  });

  it('names only npm scripts that exist', () => {
    const named = [...text.matchAll(/npm run (?:-s )?([a-z][\w:-]*)/g)].map((match) => match[1]!);
    expect(named.filter((name) => !scripts.includes(name))).toEqual([]);
  });

  it('speaks of the product, not of how it got there (no issue numbers)', () => {
    expect(text).not.toMatch(/\bissue \d+|\(#?\d{2}\)/i);
  });
});

describe('README.md', () => {
  it('is a front door: about 200 lines, the two commands first', () => {
    const readme = readFileSync('README.md', 'utf8');
    expect(readme.split('\n').length).toBeLessThanOrEqual(220);
    expect(readme).toContain('npm install && npm run dev');
    expect(readme).toContain('npm install && npm test');
  });
});

describe('.env.local.example', () => {
  const example = readFileSync('.env.local.example', 'utf8');

  it('points to docs that exist, never to README sections (the README is only a front door)', () => {
    const named = [...example.matchAll(/\b(docs\/[\w-]+\.md)/g)].map((match) => match[1]!);
    expect(named.length).toBeGreaterThan(0);
    expect(named.filter((file) => !existsSync(file))).toEqual([]);
    expect(example).not.toMatch(/README: "/);
  });

  it('names only npm scripts that exist', () => {
    const named = [...example.matchAll(/npm run (?:-s )?([a-z][\w:-]*)/g)].map((match) => match[1]!);
    expect(named.filter((name) => !scripts.includes(name))).toEqual([]);
  });
});
