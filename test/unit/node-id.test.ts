import { describe, expect, it } from 'vitest';
import { isDeadPredecessor, makeNodeId, nodeIdParts } from '../../src/ops/node-id.js';

describe('node ids', () => {
  it('carry the host name and pid they were made with', () => {
    const id = makeNodeId('app_1.example', 4242);
    expect(id).toMatch(/^app-1\.example-4242-[0-9a-f]{6}$/);
    expect(nodeIdParts(id)).toEqual({ host: 'app-1.example', pid: 4242 });
    expect(nodeIdParts('node-a')).toBeUndefined();
  });

  describe('isDeadPredecessor: what a starting node may treat as dead', () => {
    const self = 'web-7-aaaaaa';
    const alive = new Set([7, 12]);
    const isAlive = (pid: number) => alive.has(pid);

    it('a process of this machine that is gone; never a live one', () => {
      expect(isDeadPredecessor('web-31-bbbbbb', self, isAlive)).toBe(true);
      expect(isDeadPredecessor('web-12-bbbbbb', self, isAlive)).toBe(false);
    });

    it("a node id with this process's own pid but another random part: a predecessor in a restarted container", () => {
      // Under an init (tini, compose's `init: true`), the service is the same pid at every start of its container.
      expect(isDeadPredecessor('web-7-bbbbbb', self, isAlive)).toBe(true);
      expect(isDeadPredecessor(self, self, isAlive)).toBe(false);
    });

    it("another machine's node is not ours to judge, nor another configured NODE_ID; our own NODE_ID from before a restart is dead", () => {
      expect(isDeadPredecessor('db-31-bbbbbb', self, isAlive)).toBe(false);
      expect(isDeadPredecessor('node-b', self, isAlive)).toBe(false);
      expect(isDeadPredecessor('node-a', 'node-a', isAlive)).toBe(true);
      expect(isDeadPredecessor('web-31-bbbbbb', 'node-a', isAlive)).toBe(false);
    });
  });
});
