import { goldenFixtureSuite } from '../../testing/golden-suite.js';
import { kvCompressionSuite } from '../../testing/kv-compression-suite.js';
import { modelSuite } from '../../testing/model-suite.js';

// The behavioural suite every backend passes, on 2 threads (and on 3: more threads than this
// CI machine's cores, so the barriers' blocking path runs too).
modelSuite('wasm', { threads: 2 });
modelSuite('wasm', { threads: 3 }, ' (3 threads)');

goldenFixtureSuite('wasm', 'wasm backend');

kvCompressionSuite('wasm', { threads: 2 });
