// The JSON schema the structured-output benches constrain to.

/** A record whose keys are all fixed: most of its text is forced once a value ends. */
export const FIXED_KEYS = {
  type: 'object',
  properties: {
    id: { type: 'integer', minimum: 0, maximum: 999 },
    name: { type: 'string', maxLength: 8 },
    role: { enum: ['admin', 'editor', 'viewer'] },
    active: { type: 'boolean' },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    country: { enum: ['NO', 'SE', 'DK', 'FI'] },
    verified: { type: 'boolean' },
    level: { type: 'integer', minimum: 1, maximum: 9 },
  },
  required: ['id', 'name', 'role', 'active', 'age', 'country', 'verified', 'level'],
  additionalProperties: false,
};
