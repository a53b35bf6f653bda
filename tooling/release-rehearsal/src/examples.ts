import { builtinModules } from 'node:module';
import ts from 'typescript';
import { RehearsalError } from './errors.js';

/**
 * A README code block marked for the rehearsal: a fence whose info string has the word
 * `rehearsal` after the language, e.g. ```` ```ts rehearsal ```` or ```` ```sh rehearsal ````.
 * Renderers read only the first word, so the mark is invisible on GitHub and npm.
 */
export interface ReadmeExample {
  /** The fence's language: `ts`/`js` examples run under Node, `sh` examples under bash. */
  lang: 'ts' | 'js' | 'sh';
  code: string;
  /** 1-based line of the opening fence, for messages. */
  line: number;
}

const FENCE = /^(\s*)(`{3,}|~{3,})\s*([^`]*)$/;
const LANGS: Record<string, ReadmeExample['lang']> = {
  ts: 'ts',
  typescript: 'ts',
  js: 'js',
  javascript: 'js',
  sh: 'sh',
  bash: 'sh',
  shell: 'sh',
};

/**
 * The blocks of `markdown` marked `rehearsal`, in order.
 *
 * @throws {RehearsalError} BAD_EXAMPLE for a marked block in a language the rehearsal cannot
 *   run, or one whose fence is never closed.
 */
export function extractExamples(markdown: string): ReadmeExample[] {
  const lines = markdown.split(/\r?\n/);
  const examples: ReadmeExample[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, info] = open as unknown as [string, string, string, string];
    const words = info.trim().split(/\s+/);
    // Skip the body of every block, marked or not, so a fence inside it is not read as a mark.
    let end = i + 1;
    while (end < lines.length && !isClosingFence(lines[end]!, fence)) end++;
    if (words.slice(1).includes('rehearsal')) {
      const lang = LANGS[words[0]!.toLowerCase()];
      if (end >= lines.length) {
        throw new RehearsalError(
          'BAD_EXAMPLE',
          `the rehearsal block at line ${i + 1} is never closed`,
          {
            details: { line: i + 1 },
          },
        );
      }
      if (!lang) {
        throw new RehearsalError(
          'BAD_EXAMPLE',
          `the rehearsal block at line ${i + 1} is \`${words[0] || '(no language)'}\`; ` +
            'mark only ts, js or sh blocks',
          { details: { line: i + 1, lang: words[0] } },
        );
      }
      const body = lines
        .slice(i + 1, end)
        .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l));
      examples.push({ lang, code: `${body.join('\n')}\n`, line: i + 1 });
    }
    i = end;
  }
  return examples;
}

function isClosingFence(line: string, fence: string): boolean {
  const trimmed = line.trim();
  return trimmed.startsWith(fence) && /^(`+|~+)$/.test(trimmed) && trimmed[0] === fence[0];
}

/** The module specifiers an example imports (static imports, `export … from`, dynamic `import('x')`, `require('x')`). */
export function importedModules(code: string): string[] {
  return ts.preProcessFile(code, true, true).importedFiles.map((f) => f.fileName);
}

const BUILTINS = new Set(builtinModules);

/** The package a bare specifier names (`@scope/name/sub` → `@scope/name`), or undefined for a builtin or relative path. */
export function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('node:') || specifier.startsWith('.') || specifier.startsWith('/')) {
    return undefined;
  }
  const parts = specifier.split('/');
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
  return BUILTINS.has(name) ? undefined : name;
}

/**
 * Refuses an example that imports what `npm install <pkg>` would not give a user: anything but
 * Node's builtins, the package itself and the packages it depends on. A path into the
 * repository (`../src/x`) is refused too: a user has no repository.
 *
 * @throws {RehearsalError} BAD_EXAMPLE naming the first such import.
 */
export function checkExampleImports(
  code: string,
  packageName: string,
  dependencies: readonly string[],
): void {
  const allowed = new Set([packageName, ...dependencies]);
  for (const specifier of importedModules(code)) {
    if (specifier.startsWith('.') || specifier.startsWith('/')) {
      throw new RehearsalError(
        'BAD_EXAMPLE',
        `${packageName}'s README example imports '${specifier}', a path a user who installed the package does not have; import '${packageName}' instead`,
        { details: { packageName, specifier } },
      );
    }
    const name = packageOf(specifier);
    if (name !== undefined && !allowed.has(name)) {
      throw new RehearsalError(
        'BAD_EXAMPLE',
        `${packageName}'s README example imports '${specifier}', which \`npm install ${packageName}\` does not install (dependencies: ${[...allowed].slice(1).join(', ') || 'none'})`,
        { details: { packageName, specifier } },
      );
    }
  }
}

/**
 * An example as a Node program: `esm` keeps its imports (`.mjs`); `cjs` turns them into
 * `require` calls (`.cjs`), so the package's CommonJS build is what runs, and wraps the body in
 * an async function because CommonJS has no top-level await. Types are stripped either way.
 */
export function toNodeProgram(code: string, format: 'esm' | 'cjs'): string {
  const { outputText } = ts.transpileModule(code, {
    compilerOptions: {
      target: ts.ScriptTarget.ES2022,
      module: format === 'esm' ? ts.ModuleKind.ESNext : ts.ModuleKind.CommonJS,
      moduleDetection: ts.ModuleDetectionKind.Force,
      esModuleInterop: true,
      verbatimModuleSyntax: false,
      sourceMap: false,
    },
    reportDiagnostics: false,
  });
  if (format === 'esm') return outputText;
  return `(async () => {\n${outputText}\n})().catch((error) => {\n  console.error(error);\n  process.exit(1);\n});\n`;
}
