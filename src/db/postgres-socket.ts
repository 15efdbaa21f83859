import { connect, type Socket } from 'node:net';

/** The parts of postgres.js's parsed options that say where the server is. */
export interface PostgresAddress {
  host: string[];
  port: number[];
  /** A Unix socket's path, when the URL's host is a folder. */
  path?: string | false;
}

/**
 * The sockets postgres.js connects through (its `socket` option), made so that a server closing a
 * connection is an error on it, never a clean close.
 *
 * postgres.js 3.4.9 loses a query when a server closes a connection cleanly while it starts: the
 * query waits for good, and the connection reconnects in a loop without delay
 * (porsager/postgres#1193). A server refusing this node (its database or role gone) closes that
 * way after its error. An error on the socket settles every waiting query, and postgres.js backs
 * off before the next attempt. (The driver's other faults on a lost connection are patched:
 * patches/README.md.)
 *
 * A close that this side began (a connection ended by the pool) stays clean. With TLS,
 * postgres.js wraps the socket after connecting and its own close handling applies.
 */
export function postgresSockets(): (address: PostgresAddress) => Socket {
  let attempts = 0;
  return (address) => {
    const index = attempts++ % address.port.length;
    const host = address.host[index] ?? 'localhost';
    const port = address.port[index] ?? 5432;
    const socket = address.path ? connect(address.path) : connect(port, host);
    // postgres.js names the server in its errors and in TLS from these.
    Object.assign(socket, { host, port });
    socket.once('end', () => {
      if (!socket.writableEnded) socket.destroy(closedByServer(host, port));
    });
    return socket;
  };
}

function closedByServer(host: string, port: number): Error {
  return Object.assign(new Error(`the server at ${host}:${port} closed the connection`), {
    code: 'CONNECTION_CLOSED',
  });
}
