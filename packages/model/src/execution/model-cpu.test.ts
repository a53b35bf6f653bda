import { modelSuite } from './model.test-suite.js';
import { goldenFixtureSuite } from './model-golden.test-util.js';

modelSuite('cpu');

goldenFixtureSuite('cpu', 'CPU backend');
