// Shared tsup preset. Every published package ships the same shape (ESM + CJS with declarations
// for both, source maps, Node 20 syntax), so a package's tsup.config.ts names only its entries and
// what is truly its own: `export default defineConfig(kvasirTsupOptions(entries, overrides))`
// (defineConfig from the package's own tsup, so its config's type is portable).
/** @type {import('tsup').Options} */
const PRESET = {
  format: ['esm', 'cjs'],
  dts: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
  splitting: false,
};

/**
 * @param {import('tsup').Options['entry']} entry
 * @param {import('tsup').Options} [overrides]
 */
export function kvasirTsupOptions(entry, overrides = {}) {
  return { ...PRESET, entry, ...overrides };
}
