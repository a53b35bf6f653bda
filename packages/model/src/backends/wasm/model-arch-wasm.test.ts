import { archFixtureSuite } from '../../testing/arch-fixture-suite.js';

// The wasm kernels quantize activations to 8 bits per block of 32 for block weights (as
// llama.cpp's do): within 1e-4 KL of the f32-decoded weights, llama.cpp's own distance.
archFixtureSuite('wasm', 1e-3, 1e-4);
