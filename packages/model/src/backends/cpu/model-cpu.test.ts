import { goldenFixtureSuite } from '../../testing/golden-suite.js';
import { kvCompressionSuite } from '../../testing/kv-compression-suite.js';
import { modelSuite } from '../../testing/model-suite.js';

modelSuite('cpu');

goldenFixtureSuite('cpu', 'CPU backend');

kvCompressionSuite('cpu');
