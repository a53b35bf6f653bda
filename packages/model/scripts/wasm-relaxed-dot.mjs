// The post-link step of the relaxed build (scripts/build-wasm.mjs): clang 14 can neither emit
// nor assemble relaxed SIMD's `i32x4.relaxed_dot_i8x16_i7x16_add_s`, so the C source
// (src/backends/wasm/c/int8-dot.h) writes clang 14's `f32x4.fma` (the prototype relaxed madd,
// opcode fd af 01, which it emits only for __builtin_wasm_fma_f32x4) where it wants the dot,
// operands in the dot's order, and this rewrites each one to the dot (fd 93 02: both three
// bytes, so no size or offset in the module changes).
//
// It decodes every instruction of every function body (MVP, SIMD, atomics, bulk memory: what
// clang emits), so only real fma instructions are rewritten, never bytes that happen to match
// inside an immediate; a body that does not decode to its exact end is an error.

const FMA = 0xaf; // clang 14's f32x4.fma (relaxed-simd prototype)
const RELAXED_DOT = 0x113; // i32x4.relaxed_dot_i8x16_i7x16_add_s

/**
 * Rewrites every `f32x4.fma` of a linked module to `i32x4.relaxed_dot_i8x16_i7x16_add_s`.
 * @param {Uint8Array} bytes the module (modified in place)
 * @returns {number} how many instructions were rewritten
 */
export function rewriteRelaxedDot(bytes) {
  let p = 8;
  let count = 0;
  const u = () => {
    let r = 0;
    let shift = 0;
    for (;;) {
      const b = bytes[p++];
      r += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if ((b & 0x80) === 0) return r;
    }
  };
  // Signed LEBs only need skipping.
  const skipLeb = () => {
    while (bytes[p++] & 0x80);
  };
  const memarg = () => {
    u();
    u();
  };
  while (p < bytes.length) {
    const id = bytes[p++];
    const size = u();
    const end = p + size;
    if (id !== 10) {
      p = end;
      continue;
    }
    const bodies = u();
    for (let f = 0; f < bodies; f++) {
      const bodySize = u();
      const bodyEnd = p + bodySize;
      const groups = u();
      for (let g = 0; g < groups; g++) {
        u();
        p++;
      }
      while (p < bodyEnd) {
        const op = bytes[p++];
        if (op === 0x02 || op === 0x03 || op === 0x04) {
          const t = bytes[p];
          if (t === 0x40 || (t >= 0x6f && t <= 0x7f)) p++;
          else skipLeb();
        } else if (op === 0x0c || op === 0x0d || op === 0x10 || op === 0x12 || op === 0xd2) u();
        else if (op === 0x0e) {
          const n = u();
          for (let i = 0; i <= n; i++) u();
        } else if (op === 0x11 || op === 0x13) {
          u();
          u();
        } else if (op === 0x1c) {
          const n = u();
          p += n;
        } else if (op >= 0x20 && op <= 0x26) u();
        else if (op >= 0x28 && op <= 0x3e) memarg();
        else if (op === 0x3f || op === 0x40 || op === 0xd0) p++;
        else if (op === 0x41 || op === 0x42) skipLeb();
        else if (op === 0x43) p += 4;
        else if (op === 0x44) p += 8;
        else if (op === 0xfc) {
          const s = u();
          if (s === 8) {
            u();
            p++;
          } else if (s === 10) p += 2;
          else if (s === 11) p++;
          else if (s === 9 || s === 13 || (s >= 15 && s <= 17)) u();
          else if (s === 12 || s === 14) {
            u();
            u();
          } else if (s > 17) throw new Error(`unknown 0xfc ${s} at ${p}`);
        } else if (op === 0xfd) {
          const at = p;
          const s = u();
          if (s <= 11 || s === 92 || s === 93) memarg();
          else if (s === 12 || s === 13) p += 16;
          else if (s >= 21 && s <= 34) p++;
          else if (s >= 84 && s <= 91) {
            memarg();
            p++;
          } else if (s === FMA) {
            if (p - at !== 2) throw new Error(`f32x4.fma at ${at} is not a 2-byte opcode`);
            bytes[at] = 0x80 | (RELAXED_DOT & 0x7f);
            bytes[at + 1] = RELAXED_DOT >> 7;
            count++;
          }
        } else if (op === 0xfe) {
          const s = u();
          if (s === 3) p++;
          else memarg();
        } else if (
          !(op <= 0x01 || op === 0x05 || op === 0x0b || op === 0x0f || op === 0x1a) &&
          !(op === 0x1b || (op >= 0x45 && op <= 0xc4) || op === 0xd1)
        ) {
          throw new Error(`unknown opcode 0x${op.toString(16)} at ${p - 1}`);
        }
      }
      if (p !== bodyEnd || bytes[p - 1] !== 0x0b) {
        throw new Error(`function ${f} did not decode to its end (${p} vs ${bodyEnd})`);
      }
    }
    p = end;
  }
  return count;
}
