// The test page's script: @kvasir/web's entry, bundled for the browser, on `window.kvasir`.
import * as kvasir from '../../src/index.js';

(globalThis as unknown as { kvasir: typeof kvasir }).kvasir = kvasir;
