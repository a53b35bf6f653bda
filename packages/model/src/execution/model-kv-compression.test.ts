import { kvCompressionSuite } from '../testing/kv-compression-suite.js';

kvCompressionSuite('cpu');
kvCompressionSuite('webgpu');
