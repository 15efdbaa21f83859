/**
 * One HTTP/1.1 request written byte for byte over a socket, so that no client library normalises
 * the path (dot segments, encodings) or hides a body sent by mistake (after HEAD); the whole
 * answer is read until the server closes.
 */
import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  /** Lower-case names. */
  headers: Map<string, string>;
  /** Everything the server sent, head included. */
  raw: Buffer;
  /** Bytes after the head. */
  bodyBytes: number;
}

export function rawRequest(port: number, method: 'GET' | 'HEAD', target: string, headers: Record<string, string> = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect({ host: '127.0.0.1', port }, () => {
      const lines = [`${method} ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
      socket.write(Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'));
    });
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const raw = Buffer.concat(chunks);
      const split = raw.indexOf('\r\n\r\n');
      const head = raw.subarray(0, Math.max(0, split)).toString('latin1').split('\r\n');
      const parsed = new Map(head.slice(1).map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
      resolve({ status: Number(head[0]?.split(' ')[1] ?? 0), headers: parsed, raw, bodyBytes: split < 0 ? 0 : raw.length - split - 4 });
    });
  });
}
