import { createGpu, type Gpu } from '@kvasir/gpu';

/**
 * A `Gpu` on Mesa's lavapipe (Vulkan, core feature level, with the `subgroups` feature), for
 * the kernels Dawn's OpenGL ES adapter cannot run. The package's test script runs vitest
 * through `tooling/scripts/lavapipe.sh --run`, which fetches lavapipe into `.lavapipe/` and
 * sets `KVASIR_LAVAPIPE_ICD`; the Vulkan loader is pointed at it only while this device opens.
 * @throws Error naming the set-up step when the environment lacks it (a test that needs
 *   lavapipe fails rather than skips).
 */
export async function lavapipeGpu(): Promise<Gpu> {
  const icd = process.env.KVASIR_LAVAPIPE_ICD;
  if (icd === undefined || icd === '') {
    throw new Error(
      'KVASIR_LAVAPIPE_ICD is not set: run these tests with `pnpm --filter @kvasir/attention-kernels test` (its script sets up Mesa lavapipe through tooling/scripts/lavapipe.sh), or `source <(bash tooling/scripts/lavapipe.sh --env)` after running that script once',
    );
  }
  const before = process.env.VK_ICD_FILENAMES;
  process.env.VK_ICD_FILENAMES = icd;
  try {
    return await createGpu({ backend: 'vulkan' });
  } finally {
    if (before === undefined) delete process.env.VK_ICD_FILENAMES;
    else process.env.VK_ICD_FILENAMES = before;
  }
}
