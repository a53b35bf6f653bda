import { archFixtureSuite } from '../../testing/arch-fixture-suite.js';

// The wasm kernels quantize activations to 8 bits per block of 32 for block weights (as
// llama.cpp's do): within 1e-4 KL of the f32-decoded weights, llama.cpp's own distance, and
// within 3e-2 of the largest logit (measured 0.9-1.5e-2 on the qwen3 and smollm3 Q8_0 and Q4_K_M
// files; llama.cpp's own quantized run is 1.2-2.2e-2 away from Kvasir's).
archFixtureSuite('wasm', 1e-3, 1e-4, 3e-2);
