import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

async function newestSource(dir: string): Promise<number> {
  let newest = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, await newestSource(path));
    else newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** The end-to-end tests run the built CLI (`dist/cli.js`): build it when sources are newer. */
export default async function setup(): Promise<void> {
  const cli = join(root, 'dist', 'cli.js');
  if (existsSync(cli) && statSync(cli).mtimeMs >= (await newestSource(join(root, 'src')))) return;
  execFileSync('pnpm', ['exec', 'tsup'], { cwd: root, stdio: 'inherit' });
}
