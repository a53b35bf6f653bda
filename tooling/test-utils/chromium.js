// Debian's chromium, headless, for the browser tests (ARCHITECTURE.md's flags, "Where the
// system runs"). Shared by @kvasir/web's and the playground's tests.
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

const BASE_ARGS = [
  '--headless=new',
  '--no-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/** @param {{ webgpu: boolean }} options */
export function launchChromium(options) {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `${CHROMIUM} is missing: run tooling/scripts/setup.sh as root (it installs Debian's chromium), or apt-get install -y chromium`,
    );
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [...BASE_ARGS, options.webgpu ? '--enable-unsafe-webgpu' : '--disable-webgpu'],
  });
}
