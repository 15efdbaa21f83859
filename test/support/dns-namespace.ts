/**
 * A UDP socket on port 53 of a network namespace this test makes, for a test name server
 * (./dns-server.ts) that the service reaches without any of the machine's resolver
 * configuration: a namespace of its own, joined to this one by a veth pair on a /30 of 10.x
 * that no interface here uses. A node child started in the namespace binds the socket and hands
 * it over (child_process IPC passes dgram sockets), so the server itself runs in the test's
 * process, where its queries can be awaited. Needs root (ip netns).
 *
 *   const ns = await namespacedUdpSocket();
 *   const dns = await startNameServer(answer, ns.socket);   // dns.server is '10.x.y.2:53'
 *   await ns.remove();                                      // the namespace and both veth ends
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import type dgram from 'node:dgram';

export interface NamespacedSocket {
  socket: dgram.Socket;
  /** The namespace's address, where the socket is bound. */
  address: string;
  remove(): Promise<void>;
}

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();

/** A /30 of 10.200.0.0/13 that no interface here has an address in: [base, ours, theirs]. */
function freeSubnet(): [string, string, string] {
  const used = ip('-4', '-o', 'addr', 'show');
  for (;;) {
    const [b, c, d] = [200 + randomInt(8), randomInt(256), randomInt(64) * 4];
    const prefix = `10.${b}.${c}.`;
    if (!used.includes(prefix)) return [`${prefix}${d}`, `${prefix}${d + 1}`, `${prefix}${d + 2}`];
  }
}

const CHILD = `
const dgram = require('node:dgram');
const socket = dgram.createSocket('udp4');
socket.bind(53, process.argv[1], () => process.send('bound', socket, () => socket.close()));
process.on('disconnect', () => process.exit(0));
`;

export async function namespacedUdpSocket(): Promise<NamespacedSocket> {
  const tag = randomBytes(4).toString('hex');
  const namespace = `sf-dns-${tag}`;
  const [ourEnd, theirEnd] = [`sfd${tag}a`, `sfd${tag}b`];
  const [, ours, theirs] = freeSubnet();
  let child: ReturnType<typeof spawn> | undefined;
  const remove = () => {
    child?.disconnect?.();
    child?.kill();
    try {
      ip('link', 'del', ourEnd);
    } catch {
      // gone with the namespace, or never made
    }
    try {
      ip('netns', 'del', namespace);
    } catch {
      // never made
    }
    return Promise.resolve();
  };
  try {
    ip('netns', 'add', namespace);
    ip('link', 'add', ourEnd, 'type', 'veth', 'peer', 'name', theirEnd, 'netns', namespace);
    ip('addr', 'add', `${ours}/30`, 'dev', ourEnd);
    ip('link', 'set', ourEnd, 'up');
    ip('netns', 'exec', namespace, 'ip', 'addr', 'add', `${theirs}/30`, 'dev', theirEnd);
    ip('netns', 'exec', namespace, 'ip', 'link', 'set', theirEnd, 'up');
    ip('netns', 'exec', namespace, 'ip', 'link', 'set', 'lo', 'up');
    const started = spawn('ip', ['netns', 'exec', namespace, process.execPath, '-e', CHILD, theirs], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child = started;
    const socket = await new Promise<dgram.Socket>((resolve, reject) => {
      started.once('message', (_message, handle) => resolve(handle as dgram.Socket));
      started.once('exit', (code) => reject(new Error(`the namespace's socket child exited (${code})`)));
    });
    return { socket, address: theirs, remove };
  } catch (err) {
    await remove();
    throw err;
  }
}
