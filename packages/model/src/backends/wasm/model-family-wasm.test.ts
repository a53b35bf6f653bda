import { familySuite } from '../../testing/family-suite.js';

familySuite('wasm', { threads: 2 });
