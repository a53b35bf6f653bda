import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { answerAndClose } from './connections.js';

/** What Node's HTTP parser rejects, in words a client can act on. */
const PARSER_ERRORS: Readonly<Record<string, string>> = {
  HPE_INVALID_HEADER_TOKEN: 'a header name or value holds a character HTTP does not allow',
  HPE_LF_EXPECTED: 'a line ends in a bare CR or LF instead of CRLF',
  HPE_CR_EXPECTED: 'a line ends in a bare LF instead of CRLF',
  HPE_UNEXPECTED_CONTENT_LENGTH: 'Content-Length is given twice or together with Transfer-Encoding',
  HPE_INVALID_CONTENT_LENGTH: 'Content-Length is not a number',
  HPE_INVALID_TRANSFER_ENCODING: 'Transfer-Encoding is malformed',
  HPE_INVALID_CHUNK_SIZE: 'a chunk size of the chunked body is malformed',
  HPE_INVALID_METHOD: 'the request line has an unknown method',
  HPE_INVALID_URL: 'the request line has a malformed target',
  HPE_INVALID_VERSION: 'the request line has a malformed HTTP version',
  HPE_INVALID_CONSTANT: 'the request line is malformed',
  HPE_HEADER_OVERFLOW: 'the request headers are too large',
};

/**
 * Answers a request Node's HTTP parser refused (it never reaches a route) in OpenAI's error
 * shape, then closes the connection: after a framing error nothing later on it can be trusted
 * (and a peer that never closes its side must not keep it open).
 * Returns the status sent, or undefined when the socket was already gone.
 */
export function answerClientError(
  error: Error & { code?: string },
  socket: Socket,
): number | undefined {
  if (error.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return undefined;
  }
  const status =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? 431
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 408
        : 400;
  const reason =
    (error.code && PARSER_ERRORS[error.code]) ??
    (status === 408 ? 'the request was not received in time' : 'the request is not valid HTTP/1.1');
  const body = JSON.stringify({
    error: {
      message: `malformed HTTP request: ${reason}`,
      type: 'invalid_request_error',
      param: null,
      code: status === 408 ? 'request_timeout' : 'malformed_request',
    },
  });
  answerAndClose(socket, `${status} ${STATUS_CODES[status]}`, body);
  return status;
}
