// An esbuild plugin (tsup's build and the browser tests' bundles): `virtual:xgrammar-bundle`
// becomes a module whose default export is the text of `@mlc-ai/web-xgrammar`'s `lib/index.js`.
// The worker evaluates that text itself (`evaluateXGrammar` in @kvasir/model), as Node does: the
// bundle is UMD over Emscripten and reads `require('url')` on Node's path, which a bundler
// targeting browsers cannot resolve, so it is never handed to one as code.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type { Plugin } from 'esbuild';

export const XGRAMMAR_BUNDLE = 'virtual:xgrammar-bundle';

export function xgrammarBundle(): Plugin {
  return {
    name: 'xgrammar-bundle',
    setup(build) {
      build.onResolve({ filter: /^virtual:xgrammar-bundle$/ }, () => ({
        path: createRequire(import.meta.url).resolve('@mlc-ai/web-xgrammar'),
        namespace: 'xgrammar-bundle',
      }));
      build.onLoad({ filter: /.*/, namespace: 'xgrammar-bundle' }, async (args) => ({
        contents: await readFile(args.path, 'utf8'),
        loader: 'text',
      }));
    },
  };
}
