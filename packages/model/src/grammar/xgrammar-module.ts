// Loading XGrammar's WebAssembly build (`@mlc-ai/web-xgrammar`), in Node and in workers.
//
// The package declares `"type": "module"` but ships a UMD bundle (`lib/index.js`), so Node's
// `import` evaluates it as ESM and it fails at once (`require is not defined`: the bundle reads
// `require('url')` and `__filename`). Evaluated as CommonJS it loads: read the file and run it in
// a function with CommonJS's parameters, as Node's own loader wraps a `.cjs` file. Two more
// parameters shadow globals the bundle reads:
// - `process` is undefined, so its Emscripten loader takes the environment-neutral path (the
//   WebAssembly binary is embedded as a data: URI). On the Node path it runs
//   `await import('module')`, which has no host to resolve it inside a `new Function` under a
//   test runner's vm context (ERR_VM_DYNAMIC_IMPORT_CALLBACK_MISSING), and it needs nothing else
//   Node offers.
// - `console` is ours: XGrammar reports why it aborts only by printing `[FATAL] file:line:
//   reason` to stderr, and that reason belongs in the error a client gets.
// Each evaluation is a fresh WebAssembly instance, which `XGrammarCompiler` relies on to replace
// one that aborted. Outside Node (a Web Worker) the same text is evaluated the same way
// (`evaluateXGrammar`): there the bundle finds `location` and never calls `require`, and a bundler
// never sees its `require('url')` (which it cannot resolve for a browser) because it is text.
import type * as XGrammarApi from '@mlc-ai/web-xgrammar';
import { ModelError } from '../errors.js';

/** The API of `@mlc-ai/web-xgrammar` (its module namespace). */
export type XGrammarModule = typeof XGrammarApi;

/** One evaluated copy of XGrammar: its own WebAssembly instance and what it wrote to stderr. */
export interface XGrammarInstance {
  readonly xgrammar: XGrammarModule;
  /** Lines the native code wrote to stderr since the last call, oldest first (at most 32). */
  takeMessages(): string[];
}

interface NodeBuiltins {
  fs: { readFileSync(path: string, encoding: 'utf8'): string };
  module: { createRequire(from: string): { (id: string): unknown; resolve(id: string): string } };
  path: { dirname(path: string): string };
}

function nodeBuiltins(): NodeBuiltins | undefined {
  const get = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process
    ?.getBuiltinModule;
  if (!get) return undefined;
  return {
    fs: get('node:fs') as NodeBuiltins['fs'],
    module: get('node:module') as NodeBuiltins['module'],
    path: get('node:path') as NodeBuiltins['path'],
  };
}

let source: { filename: string; text: string } | undefined;

const MAX_MESSAGES = 32;

/**
 * Evaluates `@mlc-ai/web-xgrammar` as CommonJS: a new WebAssembly instance per call.
 *
 * @throws {@link ModelError} `BACKEND` outside Node (in a worker, fetch or import the bundle's
 *   text and use {@link evaluateXGrammar}) or when the package is missing.
 */
export function loadXGrammar(): XGrammarInstance {
  const node = nodeBuiltins();
  if (!node) {
    throw new ModelError(
      'BACKEND',
      "loading @mlc-ai/web-xgrammar from node_modules needs Node; elsewhere evaluate its bundle's text with evaluateXGrammar",
    );
  }
  if (!source) {
    let filename: string;
    try {
      filename = node.module.createRequire(import.meta.url).resolve('@mlc-ai/web-xgrammar');
    } catch (e) {
      throw new ModelError('BACKEND', `cannot find @mlc-ai/web-xgrammar: ${(e as Error).message}`, {
        cause: e,
      });
    }
    source = { filename, text: node.fs.readFileSync(filename, 'utf8') };
  }
  const { filename, text } = source;
  return evaluateXGrammar(text, {
    require: node.module.createRequire(filename),
    filename,
    dirname: node.path.dirname(filename),
  });
}

/** What CommonJS gives a module besides `exports` and `module`. */
export interface CommonJsHost {
  readonly require: (id: string) => unknown;
  readonly filename: string;
  readonly dirname: string;
}

/** Outside Node: a `require` that refuses by name (XGrammar's bundle calls none in a worker). */
const NO_NODE: CommonJsHost = {
  require: (id) => {
    throw new ModelError('BACKEND', `@mlc-ai/web-xgrammar asked for '${id}', which needs Node`);
  },
  filename: 'web-xgrammar/lib/index.js',
  dirname: 'web-xgrammar/lib',
};

/**
 * Evaluates the text of `@mlc-ai/web-xgrammar`'s bundle (`lib/index.js`) as CommonJS: a new
 * WebAssembly instance per call. Works wherever `new Function` and WebAssembly do (Node, Web
 * Workers; a Content-Security-Policy must allow `'unsafe-eval'`).
 */
export function evaluateXGrammar(text: string, host: CommonJsHost = NO_NODE): XGrammarInstance {
  const messages: string[] = [];
  const capture = (...args: unknown[]) => {
    messages.push(args.map(String).join(' '));
    if (messages.length > MAX_MESSAGES) messages.shift();
  };
  const quietConsole = { ...console, log: capture, error: capture, warn: capture };
  const module = { exports: {} as Record<string, unknown> };
  const evaluate = new Function(
    'exports',
    'require',
    'module',
    '__filename',
    '__dirname',
    'process',
    'console',
    text,
  ) as (...args: unknown[]) => void;
  evaluate.call(
    module.exports,
    module.exports,
    host.require,
    module,
    host.filename,
    host.dirname,
    undefined,
    quietConsole,
  );
  const xgrammar = module.exports as unknown as XGrammarModule;
  if (typeof xgrammar.GrammarCompiler !== 'function') {
    throw new ModelError(
      'BACKEND',
      'the text given as @mlc-ai/web-xgrammar exports no GrammarCompiler',
    );
  }
  return { xgrammar, takeMessages: () => messages.splice(0) };
}
