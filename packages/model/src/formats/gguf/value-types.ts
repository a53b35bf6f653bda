/** GGUF metadata value types (the `gguf_type` enum). */
export type GgufValueType =
  | 'u8'
  | 'i8'
  | 'u16'
  | 'i16'
  | 'u32'
  | 'i32'
  | 'f32'
  | 'bool'
  | 'string'
  | 'array'
  | 'u64'
  | 'i64'
  | 'f64';

/** The `gguf_type` enum: a type's index is its id in the file. */
export const GGUF_VALUE_TYPES: readonly GgufValueType[] = [
  'u8',
  'i8',
  'u16',
  'i16',
  'u32',
  'i32',
  'f32',
  'bool',
  'string',
  'array',
  'u64',
  'i64',
  'f64',
];

/** A metadata value with an explicit GGUF type, for the writer. */
export type GgufTypedValue =
  | {
      readonly type: Exclude<GgufValueType, 'array' | 'string' | 'bool'>;
      readonly value: number | bigint;
    }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'bool'; readonly value: boolean }
  | {
      readonly type: 'array';
      readonly itemType: Exclude<GgufValueType, 'array'>;
      readonly value: readonly (number | bigint | string | boolean)[];
    };

/** Byte size of each fixed-size value type. */
export const GGUF_SCALAR_SIZES: Partial<Record<GgufValueType, number>> = {
  u8: 1,
  i8: 1,
  bool: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  u64: 8,
  i64: 8,
  f64: 8,
};
