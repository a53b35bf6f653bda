import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { PluginSource } from '@kvasir/engine';

/**
 * Plug-in modules named by file paths, relative to `baseDir` (the working directory, where the
 * user typed the flag), shown in errors as absolute paths.
 */
export function nodePluginSource(baseDir = process.cwd()): PluginSource {
  return {
    resolve: (specifier) => resolve(baseDir, specifier),
    import: (path) => import(pathToFileURL(path).href),
  };
}
