import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { RehearsalError } from './errors.js';
import { checkExampleImports, type ReadmeExample, toNodeProgram } from './examples.js';
import { type CommandOutput, inheritedEnv, runCommand } from './exec.js';
import { type Registry, startRegistry } from './registry.js';
import { checkPublishedShape, entryFiles } from './shape.js';
import {
  copyWorkspace,
  type Manifest,
  publicPackages,
  readManifest,
  type WorkspacePackage,
  writeRehearsalChangeset,
} from './workspace.js';

/** Time limits, generous for a loaded two-core CI machine; each one only stops a hang. */
export const LIMITS = {
  registryStartMs: 60_000,
  versionMs: 120_000,
  publishMs: 600_000,
  installMs: 300_000,
  exampleMs: 240_000,
  /** How long to wait for a package whose entry files are missing (a build in progress). */
  buildWaitMs: 300_000,
} as const;

/** Tries of an npm command that failed on the way to the public registry. */
const UPSTREAM_ATTEMPTS = 3;

/**
 * Whether an npm failure came from the public registry behind the rehearsal's (a third-party
 * package the uplink could not fetch, or a network error), not from the rehearsed packages.
 */
export function isUpstreamFailure(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  if (/\b(ECONNRESET|ETIMEDOUT|EAI_AGAIN|ENOTFOUND|ECONNREFUSED|socket hang up)\b/.test(message)) {
    return true;
  }
  const missing = /404 Not Found - GET \S+?\/((?:@[^/%\s]+(?:%2f|\/))?[^/\s]+) /i.exec(message);
  return (
    missing !== null &&
    !decodeURIComponent(missing[1]!).startsWith('@kvasir/') &&
    missing[1] !== 'kvasir'
  );
}

/** A package installed alone in a fresh project. */
export interface InstalledPackage {
  /** The project's directory. */
  project: string;
  /** The package's directory inside the project's node_modules. */
  dir: string;
  /** Its package.json as the registry served it. */
  manifest: Manifest;
}

/**
 * One release rehearsal: a private registry on loopback with every public package published to
 * it the way `pnpm release` publishes (`changeset publish`, which runs `pnpm publish` per
 * package), from a snapshot-versioned copy of the workspace. The checkout is only read.
 */
export class Rehearsal {
  readonly #work: string;
  readonly #registry: Registry;
  readonly #versions: ReadonlyMap<string, string>;
  /** Entry files each package lacked in the copy, before publishing: it was not (fully) built. */
  readonly #unbuilt: ReadonlyMap<string, string[]>;
  readonly #env: NodeJS.ProcessEnv;
  #projects = 0;

  private constructor(
    work: string,
    registry: Registry,
    versions: ReadonlyMap<string, string>,
    unbuilt: ReadonlyMap<string, string[]>,
  ) {
    this.#work = work;
    this.#registry = registry;
    this.#versions = versions;
    this.#unbuilt = unbuilt;
    this.#env = clientEnv(work, registry.url);
  }

  /**
   * Copies the workspace, versions the copy with `changeset version --snapshot rehearsal`,
   * starts the registry and publishes every public package with `changeset publish`.
   *
   * @throws {RehearsalError} from any step; the registry and temporary files are gone by then.
   */
  static async prepare(root: string, packages: readonly WorkspacePackage[]): Promise<Rehearsal> {
    const work = mkdtempSync(join(tmpdir(), 'kvasir-rehearsal-'));
    let registry: Registry | undefined;
    try {
      const copy = join(work, 'workspace');
      await waitForBuilds(packages, LIMITS.buildWaitMs);
      copyWorkspace(root, copy, packages);
      writeRehearsalChangeset(copy, packages);
      const released = publicPackages(packages);
      const unbuilt = new Map<string, string[]>();
      for (const pkg of released) {
        const dir = join(copy, pkg.relDir);
        const missing = entryFiles(readManifest(dir)).filter(
          (file) => !existsSync(join(dir, file)),
        );
        if (missing.length > 0) unbuilt.set(pkg.name, missing);
      }
      registry = await startRegistry({
        dir: join(work, 'registry'),
        ownPackages: released.map((p) => p.name),
        uplink: await upstreamRegistry(root),
        caFile: await upstreamCaFile(root),
        startTimeoutMs: LIMITS.registryStartMs,
      });
      const env = clientEnv(work, registry.url);
      const changeset = join(root, 'node_modules', '.bin', 'changeset');
      await runCommand(changeset, ['version', '--snapshot', 'rehearsal'], {
        cwd: copy,
        env,
        timeoutMs: LIMITS.versionMs,
      });
      const versions = new Map(
        released.map((p) => [p.name, readManifest(join(copy, p.relDir)).version]),
      );
      const publish = await runCommand(changeset, ['publish', '--no-git-tag'], {
        cwd: copy,
        env,
        timeoutMs: LIMITS.publishMs,
      });
      const rehearsal = new Rehearsal(work, registry, versions, unbuilt);
      rehearsal.#checkAllPublished(publish);
      return rehearsal;
    } catch (error) {
      await registry?.stop();
      rmSync(work, { recursive: true, force: true });
      throw error;
    }
  }

  /** The registry's URL. */
  get registryUrl(): string {
    return this.#registry.url;
  }

  /** The snapshot version `name` was published at. */
  version(name: string): string {
    const version = this.#versions.get(name);
    if (version === undefined) {
      throw new RehearsalError('BAD_WORKSPACE', `${name} is not a published package`, {
        details: { name },
      });
    }
    return version;
  }

  /**
   * `npm install <name>` and nothing else in a fresh project that knows only the private
   * registry, then checks what was served (version, `workspace:` ranges, entry files).
   *
   * @throws {RehearsalError} BAD_WORKSPACE when the checkout's build of it lacked entry files
   *   (build first), COMMAND_FAILED when npm cannot install it (a 404 for an unpublished
   *   sibling), BAD_PUBLISHED_SHAPE for a wrong version or a broken manifest.
   */
  async installAlone(name: string): Promise<InstalledPackage> {
    const unbuilt = this.#unbuilt.get(name);
    if (unbuilt !== undefined) {
      // Told apart from a `files` list that drops a file: here the file was never there.
      throw new RehearsalError(
        'BAD_WORKSPACE',
        `${name} was not built when the rehearsal copied it (missing ${unbuilt.join(', ')}): the rehearsal publishes the checkout's build, so run \`pnpm build\` first (a build still running counts too)`,
        { details: { name, missing: unbuilt } },
      );
    }
    const project = this.newProject(name);
    await this.npm(['install', name], project);
    const dir = join(project, 'node_modules', name);
    const manifest = readManifest(dir);
    if (manifest.version !== this.version(name)) {
      throw new RehearsalError(
        'BAD_PUBLISHED_SHAPE',
        `npm installed ${name}@${manifest.version}, not the rehearsed ${this.version(name)}`,
        { details: { name } },
      );
    }
    checkPublishedShape(dir, manifest);
    return { project, dir, manifest };
  }

  /**
   * Runs a README example in `installed`'s project: `ts`/`js` blocks as a Node program in
   * `format` (its imports checked first), `sh` blocks with bash, `npm i -g` going to a
   * private prefix whose `bin` is first on PATH.
   *
   * @throws {RehearsalError} BAD_EXAMPLE for an import a user would not have, COMMAND_FAILED or
   *   COMMAND_TIMEOUT when the example fails or hangs.
   */
  async runExample(
    installed: InstalledPackage,
    example: ReadmeExample,
    format: 'esm' | 'cjs',
  ): Promise<CommandOutput> {
    const base = join(installed.project, `readme-line-${example.line}`);
    if (example.lang === 'sh') {
      writeFileSync(`${base}.sh`, example.code);
      return runCommand('bash', ['-eo', 'pipefail', `${base}.sh`], {
        cwd: installed.project,
        env: this.#env,
        timeoutMs: LIMITS.exampleMs,
      });
    }
    checkExampleImports(
      example.code,
      installed.manifest.name,
      Object.keys(installed.manifest.dependencies ?? {}),
    );
    const file = `${base}.${format === 'esm' ? 'mjs' : 'cjs'}`;
    writeFileSync(file, toNodeProgram(example.code, format));
    return runCommand(process.execPath, [file], {
      cwd: installed.project,
      env: this.#env,
      timeoutMs: LIMITS.exampleMs,
    });
  }

  /** Stops the registry and deletes every temporary file. */
  async dispose(): Promise<void> {
    await this.#registry.stop();
    rmSync(this.#work, { recursive: true, force: true });
  }

  private newProject(name: string): string {
    const project = join(
      this.#work,
      'projects',
      `${++this.#projects}-${name.replace(/[@/]/g, '_')}`,
    );
    mkdirSync(project, { recursive: true });
    writeFileSync(
      join(project, 'package.json'),
      `${JSON.stringify({ name: 'rehearsal-user', private: true }, null, 2)}\n`,
    );
    return project;
  }

  /**
   * Runs npm, again after a pause when it failed on the way to the public registry (a network
   * error, or a 404 for a third-party package that the registry's uplink could not fetch):
   * such a failure says nothing about the release, and one flaky moment must not fail CI.
   */
  private async npm(args: string[], cwd: string): Promise<CommandOutput> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await runCommand('npm', args, { cwd, env: this.#env, timeoutMs: LIMITS.installMs });
      } catch (error) {
        if (attempt >= UPSTREAM_ATTEMPTS || !isUpstreamFailure(error)) throw error;
        await sleep(5000 * attempt);
      }
    }
  }

  #checkAllPublished(publish: CommandOutput): void {
    const registryFiles = join(this.#work, 'registry', 'storage');
    const missing = [...this.#versions.keys()].filter(
      (name) => !existsSync(join(registryFiles, name, 'package.json')),
    );
    if (missing.length > 0) {
      throw new RehearsalError(
        'COMMAND_FAILED',
        `changeset publish left out ${missing.join(', ')}:\n${publish.stdout.slice(-3000)}${publish.stderr.slice(-3000)}`,
        { details: { missing } },
      );
    }
  }
}

/**
 * Waits until every public package's entry files exist in the checkout, or `timeoutMs` passes
 * (then the copy goes ahead and {@link Rehearsal.installAlone} names what is missing). A build
 * running beside the rehearsal (tsup empties `dist` first and writes the `.d.ts` files last)
 * would otherwise be published half-written.
 */
async function waitForBuilds(
  packages: readonly WorkspacePackage[],
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const unbuilt = () =>
    publicPackages(packages).filter((pkg) =>
      entryFiles(readManifest(pkg.dir)).some((file) => !existsSync(join(pkg.dir, file))),
    );
  while (unbuilt().length > 0 && Date.now() < deadline) await sleep(2000);
  // A build that just wrote its last entry file may still be flushing others.
  await sleep(1000);
}

/**
 * The registry this machine installs from, where third-party dependencies are proxied from:
 * the one a parent `npm test` exports, else what `npm config get registry` says (a CI mirror
 * set in ~/.npmrc), else npmjs.
 */
async function upstreamRegistry(root: string): Promise<string> {
  const exported = process.env.npm_config_registry;
  if (exported?.startsWith('http')) return exported;
  try {
    const { stdout } = await runCommand('npm', ['config', 'get', 'registry'], {
      cwd: root,
      env: inheritedEnv(),
      timeoutMs: 60_000,
    });
    if (stdout.trim().startsWith('http')) return stdout.trim();
  } catch {
    // No usable npm config: the public registry.
  }
  return 'https://registry.npmjs.org/';
}

/**
 * The certificate authorities this machine's npm trusts for the registry: `NODE_EXTRA_CA_CERTS`
 * when set, else npm's `cafile` setting. Verdaccio is a Node process and needs the same file for
 * its uplink; a test runner that filters the environment (turbo's strict mode) drops the
 * variable, and without it every third-party package was a 404.
 */
async function upstreamCaFile(root: string): Promise<string | undefined> {
  const exported = process.env.NODE_EXTRA_CA_CERTS;
  if (exported && existsSync(exported)) return exported;
  try {
    const { stdout } = await runCommand('npm', ['config', 'get', 'cafile'], {
      cwd: root,
      env: inheritedEnv(),
      timeoutMs: 60_000,
    });
    const file = stdout.trim();
    if (file.startsWith('/') && existsSync(file)) return file;
  } catch {
    // No npm setting: Node's own CA store.
  }
  return undefined;
}

/**
 * The environment of every npm, pnpm and example process: a private HOME whose `.npmrc` names
 * only the rehearsal registry (with a token, which it accepts for any value), a private npm
 * cache and global prefix, and none of the npm/pnpm settings a parent `pnpm test` exports.
 */
function clientEnv(work: string, registryUrl: string): NodeJS.ProcessEnv {
  const home = join(work, 'home');
  const prefix = join(work, 'global');
  mkdirSync(home, { recursive: true });
  mkdirSync(join(prefix, 'bin'), { recursive: true });
  const npmrc = join(home, '.npmrc');
  if (!existsSync(npmrc) || !readFileSync(npmrc, 'utf8').includes(registryUrl)) {
    const auth = registryUrl.replace(/^https?:/, '');
    writeFileSync(npmrc, `registry=${registryUrl}\n${auth}:_authToken=rehearsal\n`);
  }
  const noProxy = ['127.0.0.1', 'localhost', process.env.NO_PROXY ?? process.env.no_proxy]
    .filter(Boolean)
    .join(',');
  return {
    ...inheritedEnv(),
    HOME: home,
    PATH: `${join(prefix, 'bin')}:${process.env.PATH ?? ''}`,
    npm_config_userconfig: npmrc,
    npm_config_registry: registryUrl,
    npm_config_cache: join(work, 'npm-cache'),
    npm_config_prefix: prefix,
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
    KVASIR_CACHE_DIR: join(work, 'kvasir-cache'),
    // A proxy a CI machine needs for the internet must not carry requests to loopback.
    NO_PROXY: noProxy,
    no_proxy: noProxy,
  };
}
