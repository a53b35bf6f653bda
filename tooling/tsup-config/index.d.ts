import type { Options } from 'tsup';

/**
 * The shared Kvasir tsup options (ESM + CJS, declarations, source maps, `node20`, no splitting)
 * for `entry`, with package-specific overrides on top.
 */
export function kvasirTsupOptions(entry: Options['entry'], overrides?: Options): Options;
