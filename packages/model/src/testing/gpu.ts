/// <reference types="@webgpu/types" />
// Test-only helpers: a device on whatever adapter is present (llvmpipe in CI) and buffer I/O.

let devicePromise: Promise<GPUDevice> | undefined;
// Dawn tears the device down when its instance is garbage-collected: keep it referenced.
let instance: GPU | undefined;

/** A shared device for a test file (software adapter in CI). */
export function testDevice(): Promise<GPUDevice> {
  devicePromise ??= (async () => {
    process.env.EGL_PLATFORM ??= 'surfaceless';
    const { create, globals } = await import('webgpu');
    Object.assign(globalThis, globals);
    instance = create(['backend=opengles']);
    const adapter = await instance.requestAdapter({ featureLevel: 'compatibility' });
    if (!adapter) throw new Error('no WebGPU adapter');
    return adapter.requestDevice({
      requiredLimits: {
        maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
        maxBufferSize: adapter.limits.maxBufferSize,
        maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
      },
    });
  })();
  return devicePromise;
}

/** A storage buffer holding `data` (or zeros of `bytes`). */
export function storage(device: GPUDevice, data: ArrayBufferView | number): GPUBuffer {
  const size = typeof data === 'number' ? data : data.byteLength;
  const buf = device.createBuffer({
    size: Math.max(16, Math.ceil(size / 4) * 4),
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  if (typeof data !== 'number')
    device.queue.writeBuffer(buf, 0, data.buffer, data.byteOffset, data.byteLength);
  return buf;
}

/** A 16-byte uniform buffer of u32 values. */
export function uniformU32(device: GPUDevice, ...values: number[]): GPUBuffer {
  const buf = device.createBuffer({
    size: 16,
    usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
  });
  device.queue.writeBuffer(buf, 0, new Uint32Array([...values, 0, 0, 0, 0].slice(0, 4)));
  return buf;
}

/** Reads `bytes` of a buffer back as f32. */
export async function readF32(
  device: GPUDevice,
  src: GPUBuffer,
  bytes: number,
): Promise<Float32Array> {
  const dst = device.createBuffer({
    size: bytes,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(src, 0, dst, 0, bytes);
  device.queue.submit([enc.finish()]);
  await dst.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(dst.getMappedRange().slice(0));
  dst.unmap();
  return out;
}

/** Runs one compute pass built by `fn` and waits for it. */
export async function runPass(
  device: GPUDevice,
  fn: (pass: GPUComputePassEncoder) => void,
): Promise<void> {
  device.pushErrorScope('validation');
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  fn(pass);
  pass.end();
  device.queue.submit([enc.finish()]);
  await device.queue.onSubmittedWorkDone();
  const err = await device.popErrorScope();
  if (err) throw new Error(err.message);
}
