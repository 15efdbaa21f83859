import { randomBytes } from 'node:crypto';

/**
 * This process among the nodes that share a database: host name, pid and a random part, so that
 * two processes never share one and start-up recovery can tell a dead predecessor on the same
 * machine (its pid is gone) from a live neighbour.
 */
export function makeNodeId(hostname: string, pid: number): string {
  const host = hostname.replace(/[^A-Za-z0-9.-]/g, '-').slice(0, 40) || 'node';
  return `${host}-${pid}-${randomBytes(3).toString('hex')}`;
}

/** The host name and pid a node id made by makeNodeId carries; undefined for a configured NODE_ID. */
export function nodeIdParts(nodeId: string): { host: string; pid: number } | undefined {
  const m = /^(.+)-(\d+)-[0-9a-f]{6}$/.exec(nodeId);
  return m ? { host: m[1]!, pid: Number(m[2]) } : undefined;
}

/**
 * Whether the node `nodeId` is provably dead, as seen by this node (`ownNodeId`) at its start: a
 * configured NODE_ID only when it is this node's own (from before a restart); a made one only on
 * this machine (one pid namespace per host name), when its process is gone, or when its pid is
 * this process's own: a predecessor in a restarted container, whose pids count from 1 again.
 */
export function isDeadPredecessor(
  nodeId: string,
  ownNodeId: string,
  isProcessAlive: (pid: number) => boolean,
): boolean {
  const parts = nodeIdParts(nodeId);
  if (parts === undefined) return nodeId === ownNodeId;
  const own = nodeIdParts(ownNodeId);
  if (own === undefined || parts.host !== own.host) return false;
  return parts.pid === own.pid ? nodeId !== ownNodeId : !isProcessAlive(parts.pid);
}
