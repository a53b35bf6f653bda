import type { UserConfig } from 'vitest/config';

/** The shared Kvasir vitest preset, merged with package-specific overrides. */
export function kvasirVitestConfig(overrides?: UserConfig): UserConfig;
