import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { RehearsalError } from './errors.js';

/** The fields of a package.json the rehearsal reads. */
export interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  main?: string;
  module?: string;
  types?: string;
  bin?: string | Record<string, string>;
  exports?: unknown;
  files?: string[];
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}

/** One package of the pnpm workspace. */
export interface WorkspacePackage {
  name: string;
  /** Absolute directory. */
  dir: string;
  /** Directory relative to the workspace root (`packages/kv-allocator`). */
  relDir: string;
  manifest: Manifest;
}

export const DEPENDENCY_FIELDS = [
  'dependencies',
  'devDependencies',
  'peerDependencies',
  'optionalDependencies',
] as const;

/**
 * Every package of the workspace at `root`, from the globs of its `pnpm-workspace.yaml`
 * (the `dir/*` and plain `dir` forms the repository uses), sorted by directory.
 *
 * @throws {RehearsalError} BAD_WORKSPACE for a glob form it cannot read or two packages with one name.
 */
export function readWorkspace(root: string): WorkspacePackage[] {
  const yaml = readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8');
  const globs: string[] = [];
  let inPackages = false;
  for (const line of yaml.split(/\r?\n/)) {
    if (/^\S/.test(line)) inPackages = /^packages\s*:/.test(line);
    const item = inPackages ? /^\s+-\s*["']?([^"'#]+?)["']?\s*(#.*)?$/.exec(line) : null;
    if (item) globs.push(item[1]!);
  }
  const dirs: string[] = [];
  for (const glob of globs) {
    if (glob.startsWith('!')) continue;
    if (glob.endsWith('/*') && !glob.slice(0, -2).includes('*')) {
      const parent = join(root, glob.slice(0, -2));
      if (!existsSync(parent)) continue;
      for (const entry of readdirSync(parent, { withFileTypes: true })) {
        if (entry.isDirectory()) dirs.push(join(parent, entry.name));
      }
    } else if (!glob.includes('*')) {
      dirs.push(join(root, glob));
    } else {
      throw new RehearsalError(
        'BAD_WORKSPACE',
        `pnpm-workspace.yaml glob '${glob}' is not of the form 'dir/*' or 'dir'`,
        {
          details: { glob },
        },
      );
    }
  }
  const packages: WorkspacePackage[] = [];
  const seen = new Map<string, string>();
  for (const dir of dirs.sort()) {
    const file = join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const manifest = JSON.parse(readFileSync(file, 'utf8')) as Manifest;
    const other = seen.get(manifest.name);
    if (other !== undefined) {
      throw new RehearsalError('BAD_WORKSPACE', `${manifest.name} is both ${other} and ${dir}`, {
        details: { name: manifest.name },
      });
    }
    seen.set(manifest.name, dir);
    packages.push({ name: manifest.name, dir, relDir: relative(root, dir), manifest });
  }
  return packages;
}

/** The packages a release publishes: every one not marked `private`. */
export function publicPackages(packages: readonly WorkspacePackage[]): WorkspacePackage[] {
  return packages.filter((p) => p.manifest.private !== true);
}

// Build and test by-products a release never reads; everything else of a package is copied so
// that `files` in package.json, not this list, decides what is published.
const NOT_COPIED = new Set([
  'node_modules',
  '.turbo',
  '.vitest-report.json',
  'coverage',
  'bench-results',
  '.kvasir-cache',
]);

/**
 * Makes `dest` a copy of the workspace at `root` that a release can run in without touching
 * the checkout: the root manifest, `pnpm-workspace.yaml`, `.changeset/` (config and pending
 * changesets), each public package's directory (built `dist` included) and each private
 * package's manifest only. In place of `pnpm install`, each copied package gets a
 * `node_modules` with links to the copies of its `workspace:` dependencies, which is all
 * `pnpm publish` reads there (to turn `workspace:^` into a version range).
 */
export function copyWorkspace(
  root: string,
  dest: string,
  packages: readonly WorkspacePackage[],
): void {
  mkdirSync(dest, { recursive: true });
  for (const file of ['package.json', 'pnpm-workspace.yaml', '.npmrc']) {
    if (existsSync(join(root, file))) cpSync(join(root, file), join(dest, file));
  }
  cpSync(join(root, '.changeset'), join(dest, '.changeset'), { recursive: true });
  const publicNames = new Set(publicPackages(packages).map((p) => p.name));
  for (const pkg of packages) {
    const target = join(dest, pkg.relDir);
    if (publicNames.has(pkg.name)) {
      cpSync(pkg.dir, target, {
        recursive: true,
        filter: (src) => src === pkg.dir || !NOT_COPIED.has(basename(src)),
      });
    } else {
      mkdirSync(target, { recursive: true });
      cpSync(join(pkg.dir, 'package.json'), join(target, 'package.json'));
    }
  }
  const dirOf = new Map(packages.map((p) => [p.name, join(dest, p.relDir)]));
  for (const pkg of packages) {
    if (!publicNames.has(pkg.name)) continue;
    for (const field of DEPENDENCY_FIELDS) {
      for (const [dep, range] of Object.entries(pkg.manifest[field] ?? {})) {
        if (!range.startsWith('workspace:')) continue;
        const depDir = dirOf.get(dep);
        if (depDir === undefined) {
          throw new RehearsalError(
            'BAD_WORKSPACE',
            `${pkg.name} depends on ${dep}@${range}, which is not in the workspace`,
            {
              details: { name: pkg.name, dependency: dep },
            },
          );
        }
        const link = join(dest, pkg.relDir, 'node_modules', dep);
        mkdirSync(dirname(link), { recursive: true });
        if (!existsSync(link)) symlinkSync(resolve(depDir), link, 'dir');
      }
    }
  }
}

/**
 * Adds a changeset that bumps every public package, so the snapshot versions them all whether or
 * not each has a pending change, as a first release would.
 */
export function writeRehearsalChangeset(dest: string, packages: readonly WorkspacePackage[]): void {
  const lines = publicPackages(packages).map((p) => `"${p.name}": patch`);
  // `wx`: a real changeset of that name is never overwritten.
  writeFileSync(
    join(dest, '.changeset', 'rehearsal-bump-every-package.md'),
    `---\n${lines.join('\n')}\n---\n\nRelease rehearsal: every public package, as a first release.\n`,
    { flag: 'wx' },
  );
}

/** Reads a package.json. */
export function readManifest(dir: string): Manifest {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
}
