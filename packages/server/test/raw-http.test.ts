import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type KvasirServer } from '../src/server.js';
import { MODEL_ID, ScriptedEngine } from './scripted-engine.js';

// What a client library would never send: hand-written request bytes on a raw TCP socket.

interface RawResponse {
  readonly status: number;
  readonly headers: string;
  readonly body: string;
}

let server: KvasirServer;
let port: number;
const KEY = 'sk-raw-secret';

beforeAll(async () => {
  server = createServer({ engine: new ScriptedEngine(), port: 0, apiKey: KEY });
  port = Number(new URL(await server.listen()).port);
});

afterAll(async () => {
  await server.close(0);
});

/** Sends `bytes` as they are and reads the first response until the server closes or it is complete. */
function raw(bytes: string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let data = '';
    const finish = () => {
      const cut = data.indexOf('\r\n\r\n');
      if (cut < 0) return false;
      const head = data.slice(0, cut);
      let body = data.slice(cut + 4);
      const length = /content-length: *(\d+)/i.exec(head);
      if (length) {
        if (Buffer.byteLength(body) < Number(length[1])) return false;
      } else if (/transfer-encoding: *chunked/i.test(head)) {
        if (!body.endsWith('0\r\n\r\n')) return false;
        body = body.replace(/^[0-9a-f]+\r\n|\r\n[0-9a-f]+\r\n/gi, '').replace(/\r\n$/, '');
      } else {
        return false;
      }
      socket.destroy();
      resolve({ status: Number(head.split(' ')[1]), headers: head, body });
      return true;
    };
    socket.on('data', (chunk) => {
      data += chunk.toString('utf8');
      finish();
    });
    socket.on('end', () => {
      if (!finish()) reject(new Error(`connection closed without a full response: ${data}`));
    });
    socket.on('error', reject);
    socket.write(bytes);
  });
}

const get = (target: string, extra = '') =>
  raw(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}Connection: close\r\n\r\n`);

function post(target: string, body: unknown, extra = ''): Promise<RawResponse> {
  const text = JSON.stringify(body);
  return raw(
    `POST ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n${extra}Connection: close\r\n\r\n${text}`,
  );
}

/** Every error body is OpenAI's: `{ error: { message, type, param, code } }` and nothing else. */
function expectOpenAiError(res: RawResponse, status: number, type: string) {
  expect(res.status).toBe(status);
  const body = JSON.parse(res.body) as { error: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(body.error.type).toBe(type);
  expect(typeof body.error.message).toBe('string');
  expect(String(body.error.message)).not.toMatch(/\n\s+at /);
  return body.error;
}

const completion = { model: MODEL_ID, prompt: 'hi', max_tokens: 2 };
const chat = { model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

describe('the API key holds on the route that runs, however the target is spelled', () => {
  const spellings = [
    '/v1/models',
    '/%761/models',
    '/%76%31/models',
    '/v%31/models',
    '/v1/%6dodels',
    '/v1/models/',
    '//v1/models',
    '/v1/models?x=1',
    `/v1/models/${MODEL_ID}`,
    `http://127.0.0.1:PORT/v1/models`,
    `http://evil.example/v1/models`,
  ];
  for (const target of spellings) {
    it(`GET ${target} without a key is 401`, async () => {
      const res = await get(target.replace('PORT', String(port)));
      // 401 for every route that exists; a spelling no route matches may be 404 only with a key.
      expectOpenAiError(res, 401, 'authentication_error');
    });
  }

  for (const target of ['/v1/completions', '/%761/completions', '/v1/%63ompletions']) {
    it(`POST ${target} without a key is 401 and generates nothing`, async () => {
      expectOpenAiError(await post(target, completion), 401, 'authentication_error');
    });
  }

  it('POST /%761/chat/completions without a key is 401', async () => {
    expectOpenAiError(await post('/%761/chat/completions', chat), 401, 'authentication_error');
  });

  it('a wrong key or a non-Bearer scheme is 401; the right key works on the encoded spelling', async () => {
    expectOpenAiError(
      await get('/v1/models', 'Authorization: Bearer sk-wrong\r\n'),
      401,
      'authentication_error',
    );
    expectOpenAiError(
      await get('/v1/models', `Authorization: Basic ${KEY}\r\n`),
      401,
      'authentication_error',
    );
    const ok = await post('/%761/completions', completion, `Authorization: Bearer ${KEY}\r\n`);
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body).object).toBe('text_completion');
  });

  it('unknown routes need the key too; /health and /metrics stay open', async () => {
    expectOpenAiError(await get('/admin'), 401, 'authentication_error');
    expectOpenAiError(
      await get('/admin', `Authorization: Bearer ${KEY}\r\n`),
      404,
      'invalid_request_error',
    );
    expect((await get('/health')).status).toBe(200);
    expect((await get('/%68ealth')).status).toBe(200);
    expect((await get('/metrics')).status).toBe(200);
  });
});

describe('requests the HTTP parser refuses are answered in OpenAI error shape', () => {
  const auth = `Authorization: Bearer ${KEY}\r\n`;
  const cases: [string, string][] = [
    [
      'a bare LF in a header value',
      `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\nb\r\n${auth}\r\n`,
    ],
    [
      'a duplicate Content-Length',
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`,
    ],
    [
      'a bad chunked encoding',
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
    ],
    [
      'Content-Length together with Transfer-Encoding (smuggling)',
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    ],
    ['a garbage request line', 'HELLO THERE\r\n\r\n'],
    ['a header without a colon', `GET /v1/models HTTP/1.1\r\nHost x\r\n\r\n`],
  ];
  for (const [what, bytes] of cases) {
    it(`${what}: 400 in OpenAI's shape, connection closed`, async () => {
      const res = await raw(bytes);
      const error = expectOpenAiError(res, 400, 'invalid_request_error');
      expect(error.message).toMatch(/^malformed HTTP request: /);
      expect(res.headers).toMatch(/connection: close/i);
    });
  }

  it('headers over the limit: 431 in the same shape', async () => {
    const res = await raw(
      `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    expectOpenAiError(res, 431, 'invalid_request_error');
  });

  it('the server keeps serving after each of them', async () => {
    const res = await post('/v1/completions', completion, auth);
    expect(res.status).toBe(200);
  });
});

describe('prompt token ids are checked against the vocabulary', () => {
  const auth = `Authorization: Bearer ${KEY}\r\n`;
  it('an id past the vocabulary is 400 naming the prompt', async () => {
    const res = await post('/v1/completions', { ...completion, prompt: [999999999, 5] }, auth);
    const error = expectOpenAiError(res, 400, 'invalid_request_error');
    expect(error.param).toBe('prompt');
    expect(error.message).toMatch(/token 0 has id 999999999, outside the vocabulary/);
    expect((await get('/health')).status).toBe(200);
  });

  it('ids inside it are served', async () => {
    const res = await post('/v1/completions', { ...completion, prompt: [104, 105] }, auth);
    expect(res.status).toBe(200);
  });
});
