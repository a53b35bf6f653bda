// The benchmark page's peer: wllama (llama.cpp compiled to WebAssembly) on `window.Wllama`.
import { Wllama } from '@wllama/wllama/esm/index.js';

(globalThis as unknown as { Wllama: typeof Wllama }).Wllama = Wllama;
