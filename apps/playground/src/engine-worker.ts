// The engine's Web Worker, bundled by Vite (`new Worker(new URL(...), { type: 'module' })`).
import '@kvasir/web/worker';
