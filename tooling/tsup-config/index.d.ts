import type { Options } from 'tsup';

/**
 * The shared Kvasir tsup options (ESM + CJS, declarations, source maps, `node20`, no splitting)
 * for `entry`, with package-specific overrides on top.
 */
export function kvasirTsupOptions(entry: Options['entry'], overrides?: Options): Options;

/** {@link kvasirTsupOptions} as a tsup config: what a package's `tsup.config.ts` exports. */
export function kvasirTsupConfig(entry: Options['entry'], overrides?: Options): Options;
