import type { Browser } from 'playwright-core';

/** Debian's chromium, where the browser tests expect it. */
export declare const CHROMIUM: string;

/**
 * Debian's chromium, headless; `webgpu: false` leaves WebGPU off (no `--enable-unsafe-webgpu`).
 * @throws Error naming the set-up step when chromium is missing.
 */
export declare function launchChromium(options: { readonly webgpu: boolean }): Promise<Browser>;
