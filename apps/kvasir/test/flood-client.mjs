// Sends `count` requests at once, each on its own raw socket with `connection: close`, and
// reports how each ended: a status code, a refused or reset connection, or nothing before the
// deadline (hung). Run as a child process so its open-file limit can be raised on its own.
import { connect } from 'node:net';

const [url, count, deadlineMs, apiKey, model] = process.argv.slice(2);
const { hostname, port } = new URL(url);
const body = JSON.stringify({ model, prompt: 'many at once', max_tokens: 1, temperature: 0 });
const request = `POST /v1/completions HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\nauthorization: Bearer ${apiKey}\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

const outcomes = new Map();
const count1 = (key) => outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
const started = Date.now();
let slowest = 0;

function one() {
  return new Promise((resolve) => {
    let done = false;
    let head = '';
    const finish = (key) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      count1(key);
      slowest = Math.max(slowest, Date.now() - started);
      resolve();
    };
    const socket = connect({ host: hostname, port: Number(port) });
    const timer = setTimeout(() => finish('hung'), Number(deadlineMs));
    socket.on('connect', () => socket.write(request));
    socket.on('data', (chunk) => {
      head += chunk.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
      if (m) finish(m[1]);
    });
    socket.on('error', (e) => finish(e.code === 'ECONNREFUSED' ? 'refused' : 'reset'));
    socket.on('close', () => finish('reset'));
  });
}

await Promise.all(Array.from({ length: Number(count) }, one));
process.stdout.write(
  `${JSON.stringify({ outcomes: Object.fromEntries(outcomes), ms: Date.now() - started, slowest })}\n`,
);
