/**
 * A name server for tests: UDP, one question per query, answering as `answer` says for each name
 * and type: addresses, NXDOMAIN, or nothing at all (the query is recorded and never answered).
 * It listens on a socket of 127.0.0.1 by default, or on one given (test/support/dns-namespace.ts
 * hands it a socket bound in a network namespace of the test's own).
 *
 *   const dns = await startNameServer((name) => (name.endsWith('.silent.test') ? 'silent' : { a: ['127.0.0.1'] }));
 *   dns.server                                // '127.0.0.1:<port>', for DNS_SERVERS
 *   await dns.waitForQueries(8, (q) => q.name.endsWith('.silent.test'));
 */
import dgram from 'node:dgram';
import { once } from 'node:events';
import net from 'node:net';

export type NameAnswer = { a?: string[]; aaaa?: string[] } | 'nxdomain' | 'silent';

export interface NameQuery {
  name: string;
  type: 'A' | 'AAAA' | `type ${number}`;
  at: number;
  /** False: left unanswered on purpose. */
  answered: boolean;
}

export interface TestNameServer {
  /** `ip:port`, as DNS_SERVERS takes it. */
  readonly server: string;
  readonly queries: NameQuery[];
  /** Resolves with the first `count` queries matching `where`, as soon as they have come. */
  waitForQueries(count: number, where?: (query: NameQuery) => boolean, timeoutMs?: number): Promise<NameQuery[]>;
  close(): Promise<void>;
}

const TYPE_A = 1;
const TYPE_AAAA = 28;

export async function startNameServer(
  answer: (name: string, type: NameQuery['type']) => NameAnswer,
  given?: dgram.Socket,
): Promise<TestNameServer> {
  const socket = given ?? dgram.createSocket('udp4');
  if (!given) {
    socket.bind(0, '127.0.0.1');
    await once(socket, 'listening');
  }
  const queries: NameQuery[] = [];
  const waiters = new Set<() => void>();

  socket.on('message', (message, from) => {
    const question = parseQuestion(message);
    if (!question) return;
    const type: NameQuery['type'] =
      question.type === TYPE_A ? 'A' : question.type === TYPE_AAAA ? 'AAAA' : `type ${question.type}`;
    const decided = answer(question.name, type);
    queries.push({ name: question.name, type, at: Date.now(), answered: decided !== 'silent' });
    for (const wake of [...waiters]) wake();
    if (decided === 'silent') return;
    const records =
      decided === 'nxdomain'
        ? []
        : type === 'A'
          ? (decided.a ?? []).map(ipv4Bytes)
          : type === 'AAAA'
            ? (decided.aaaa ?? []).map(ipv6Bytes)
            : [];
    socket.send(
      reply(message, question.end, question.type, decided === 'nxdomain' ? 3 : 0, records),
      from.port,
      from.address,
    );
  });

  const { address, port } = socket.address();
  return {
    server: net.isIPv6(address) ? `[${address}]:${port}` : `${address}:${port}`,
    queries,
    waitForQueries(count, where = () => true, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const matching = queries.filter(where);
          if (matching.length < count) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(matching.slice(0, count));
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(
              `the name server got ${queries.filter(where).length} of ${count} queries: ${JSON.stringify(queries.slice(-20))}`,
            ),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    async close() {
      await new Promise<void>((resolve) => socket.close(() => resolve()));
    },
  };
}

/** The question of a query: its name (lower case, no trailing dot), type, and where the question ends. */
function parseQuestion(message: Buffer): { name: string; type: number; end: number } | null {
  if (message.length < 12 || message.readUInt16BE(4) < 1) return null;
  const labels: string[] = [];
  let at = 12;
  while (at < message.length) {
    const length = message[at]!;
    at += 1;
    if (length === 0) break;
    if (length > 63 || at + length > message.length) return null;
    labels.push(
      message
        .subarray(at, at + length)
        .toString('latin1')
        .toLowerCase(),
    );
    at += length;
  }
  if (at + 4 > message.length) return null;
  return { name: labels.join('.'), type: message.readUInt16BE(at), end: at + 4 };
}

/** The query's header and question, then one IN record per address (the name as a pointer to the question's). */
function reply(query: Buffer, questionEnd: number, type: number, rcode: number, records: Buffer[]): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2);
  const recursionDesired = query[2]! & 0x01;
  header[2] = 0x84 | recursionDesired; // QR, AA, RD as asked
  header[3] = 0x80 | rcode; // RA
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(records.length, 6);
  const answers = records.map((rdata) => {
    const record = Buffer.alloc(12 + rdata.length);
    record.writeUInt16BE(0xc00c, 0);
    record.writeUInt16BE(type, 2);
    record.writeUInt16BE(1, 4);
    record.writeUInt32BE(60, 6);
    record.writeUInt16BE(rdata.length, 10);
    rdata.copy(record, 12);
    return record;
  });
  return Buffer.concat([header, query.subarray(12, questionEnd), ...answers]);
}

function ipv4Bytes(address: string): Buffer {
  return Buffer.from(address.split('.').map(Number));
}

function ipv6Bytes(address: string): Buffer {
  const [head, tail] = address.includes('::') ? address.split('::') : [address, undefined];
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups =
    tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  const bytes = Buffer.alloc(16);
  groups.forEach((group, index) => bytes.writeUInt16BE(parseInt(group || '0', 16), index * 2));
  return bytes;
}
