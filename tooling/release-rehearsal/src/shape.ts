import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { RehearsalError } from './errors.js';
import { DEPENDENCY_FIELDS, type Manifest } from './workspace.js';

/**
 * Every file a manifest points a consumer at: each target of `exports` (all conditions, no
 * `*` patterns), `main`, `module`, `types` and each `bin`, as written (`./dist/index.js`).
 */
export function entryFiles(manifest: Manifest): string[] {
  const files = new Set<string>();
  const visit = (target: unknown): void => {
    if (typeof target === 'string') {
      if (!target.includes('*')) files.add(target);
    } else if (Array.isArray(target)) {
      target.forEach(visit);
    } else if (target !== null && typeof target === 'object') {
      Object.values(target).forEach(visit);
    }
  };
  visit(manifest.exports);
  for (const field of [manifest.main, manifest.module, manifest.types]) visit(field);
  visit(typeof manifest.bin === 'string' ? manifest.bin : Object.values(manifest.bin ?? {}));
  return [...files].sort();
}

/**
 * Checks what a registry served for one package, as installed at `installedDir`: no dependency
 * range still says `workspace:` (npm cannot install it), and every entry file exists (a
 * `files` list that lost one publishes a package that cannot be imported).
 *
 * @throws {RehearsalError} BAD_PUBLISHED_SHAPE naming every problem found.
 */
export function checkPublishedShape(installedDir: string, manifest: Manifest): void {
  const problems: string[] = [];
  for (const field of DEPENDENCY_FIELDS) {
    for (const [dep, range] of Object.entries(manifest[field] ?? {})) {
      if (range.startsWith('workspace:')) problems.push(`${field}: ${dep}@${range}`);
    }
  }
  for (const file of entryFiles(manifest)) {
    if (!existsSync(join(installedDir, file)))
      problems.push(`missing ${file} (named in package.json, not in the tarball)`);
  }
  if (problems.length > 0) {
    throw new RehearsalError(
      'BAD_PUBLISHED_SHAPE',
      `${manifest.name}@${manifest.version} as published: ${problems.join('; ')}`,
      { details: { name: manifest.name, problems } },
    );
  }
}

/** Whether the package's main entry (`.` in `exports`) can be `require`d. */
export function shipsCommonJs(manifest: Manifest): boolean {
  const exportsField = manifest.exports;
  if (exportsField === undefined)
    return manifest.main !== undefined && !manifest.main.endsWith('.mjs');
  const root =
    typeof exportsField === 'object' && exportsField !== null && '.' in exportsField
      ? (exportsField as Record<string, unknown>)['.']
      : exportsField;
  return hasCondition(root, 'require');
}

function hasCondition(target: unknown, condition: string): boolean {
  if (target === null || typeof target !== 'object' || Array.isArray(target)) return false;
  return Object.entries(target).some(
    ([key, value]) => key === condition || hasCondition(value, condition),
  );
}
