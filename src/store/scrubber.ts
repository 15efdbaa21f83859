import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Database } from '../db/database.js';
import { giveBackLease, readLease, setLease, takeLease } from '../db/leases.js';
import { ServiceError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ContentStore } from './content-store.js';
import { createReadPacer } from './read-pacer.js';
import { emptyProgress, scrubStore, type ScrubFinding, type ScrubProgress } from './scrub.js';

/**
 * Runs scrub passes (./scrub.ts): on request (POST /store/scrub), and in the background every
 * `intervalMs` (SCRUB_INTERVAL_S; 0: only on request). One pass at a time on this node (a request
 * during a pass joins it), and one node at a time over a shared store: a pass holds the
 * 'store-scrub' lease, renewed as it goes; a request on another node meanwhile is refused with
 * scrub_running_elsewhere. When the next background pass is due is kept in the database (the
 * 'store-scrub-due' lease row: every node looks at it, the node that ends a pass moves it on), so
 * that many nodes scrub the store once per interval between them, and restarts do not put it off
 * or bring it forward. A store seen for the first time is due one interval later.
 *
 * Reads are paced to `bytesPerSecond` (SCRUB_BYTES_PER_S), so a pass never competes with delivery
 * for the disk; it holds one read buffer and a hash.
 */
export type ScrubStatus = 'running' | 'done' | 'failed' | 'stopped';

export interface ScrubReport extends ScrubProgress {
  passId: string;
  nodeId: string;
  trigger: 'request' | 'schedule';
  status: ScrubStatus;
  startedAt: number;
  finishedAt: number | null;
  /** Why a failed pass stopped (no server path: it is shown to clients). */
  error: string | null;
}

export interface ScrubPass {
  readonly id: string;
  /** The report as it stands (a copy). */
  report(): ScrubReport;
  /** The final report. */
  readonly ended: Promise<ScrubReport>;
}

export interface Scrubber {
  /** Starts a pass on this node, or joins the one running here; throws scrub_running_elsewhere when another node holds the lease. */
  request(): Promise<ScrubPass>;
  /** The pass running on this node, or else the last one that ended here. */
  latest(): ScrubPass | undefined;
  start(): void;
  /** Ends the timer, and the pass under way (stopped). */
  stop(): Promise<void>;
}

export interface ScrubberMetrics {
  addScrubReadBytes(bytes: number): void;
  observeScrubChecked(): void;
  observeScrubFinding(finding: ScrubFinding): void;
  observeScrubCompleted(atMs: number): void;
}

export const SCRUB_LEASE = 'store-scrub';
export const SCRUB_DUE_LEASE = 'store-scrub-due';
const LEASE_MS = 10 * 60 * 1000;
const RENEW_MS = 60 * 1000;
/** How often the timer looks whether a pass is due (more often when the interval is shorter). */
const TICK_MS = 60 * 1000;
const MAX_CHUNK_BYTES = 1024 * 1024;
const MIN_CHUNK_BYTES = 64 * 1024;

export function createScrubber(deps: {
  database: Database;
  store: Pick<ContentStore, 'root' | 'pathOf'>;
  nodeId: string;
  log: Logger;
  /** Wall-clock milliseconds. */
  now: () => number;
  intervalMs: number;
  bytesPerSecond: number;
  quarantineDir: string;
  metrics?: ScrubberMetrics;
  /** Monotonic milliseconds and a sleep, for the pacing; default performance.now and timers. */
  clock?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}): Scrubber {
  const clock = deps.clock ?? (() => performance.now());
  const pause = deps.sleep ?? ((ms: number, signal?: AbortSignal) => sleep(ms, undefined, { signal }));
  // Reads of about a sixteenth of a second at the rate: the pacing stays smooth at low rates.
  const chunkBytes = Math.min(MAX_CHUNK_BYTES, Math.max(MIN_CHUNK_BYTES, Math.floor(deps.bytesPerSecond / 16)));
  let current: { pass: ScrubPass; abort: AbortController } | undefined;
  let last: ScrubPass | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  // Starts one after the other: a pass is begun (its lease taken) by one caller at a time.
  let starting: Promise<unknown> = Promise.resolve();

  function begin(trigger: ScrubReport['trigger']): Promise<ScrubPass | undefined> {
    const attempt = starting.then(async () => {
      if (current) return current.pass;
      if (stopped)
        throw new ServiceError('unavailable', 'shutting_down', 'The service is shutting down; try again shortly.');
      if (!(await takeLease(deps.database, SCRUB_LEASE, deps.nodeId, deps.now(), LEASE_MS))) {
        if (trigger === 'schedule') return undefined;
        const holder = (await readLease(deps.database, SCRUB_LEASE))?.holder ?? 'another node';
        throw new ServiceError(
          'conflict',
          'scrub_running_elsewhere',
          `Node ${holder} is scrubbing the store; ask that node, or try again once it is done.`,
          {
            fields: { node_id: holder },
          },
        );
      }
      // Another node may have ended a pass since the timer looked.
      if (trigger === 'schedule' && !(await due())) {
        await giveBackLease(deps.database, SCRUB_LEASE, deps.nodeId);
        return undefined;
      }
      return launch(trigger);
    });
    starting = attempt.catch(() => {});
    return attempt;
  }

  function launch(trigger: ScrubReport['trigger']): ScrubPass {
    const report: ScrubReport = {
      ...emptyProgress(),
      passId: randomUUID(),
      nodeId: deps.nodeId,
      trigger,
      status: 'running',
      startedAt: deps.now(),
      finishedAt: null,
      error: null,
    };
    const abort = new AbortController();
    const snapshot = (): ScrubReport => ({ ...report, findings: [...report.findings] });
    const ended = run(report, abort.signal)
      .finally(() => {
        last = pass;
        current = undefined;
      })
      .then(snapshot);
    const pass: ScrubPass = { id: report.passId, report: snapshot, ended };
    current = { pass, abort };
    return pass;
  }

  async function run(report: ScrubReport, signal: AbortSignal): Promise<void> {
    const fields = { pass_id: report.passId, trigger: report.trigger };
    deps.log.info(fields, 'store scrub: pass started');
    let renewedAt = clock();
    const metrics = deps.metrics;
    try {
      await scrubStore(
        {
          database: deps.database,
          store: deps.store,
          quarantineDir: deps.quarantineDir,
          now: deps.now,
          pacer: createReadPacer({
            bytesPerSecond: deps.bytesPerSecond,
            burstBytes: chunkBytes,
            now: clock,
            sleep: pause,
          }),
          buffer: Buffer.allocUnsafe(chunkBytes),
          signal,
          log: deps.log.child(fields),
          onRead: (bytes) => metrics?.addScrubReadBytes(bytes),
          onChecked: () => metrics?.observeScrubChecked(),
          onFinding: (finding) => metrics?.observeScrubFinding(finding),
          beforeEach: async () => {
            if (clock() - renewedAt < RENEW_MS) return;
            if (!(await takeLease(deps.database, SCRUB_LEASE, deps.nodeId, deps.now(), LEASE_MS)))
              throw new Error('the scrub lease was lost to another node');
            renewedAt = clock();
          },
        },
        report,
      );
      report.status = 'done';
      report.finishedAt = deps.now();
      metrics?.observeScrubCompleted(report.finishedAt);
      await setLease(deps.database, SCRUB_DUE_LEASE, deps.nodeId, report.finishedAt + deps.intervalMs).catch(
        (err: unknown) =>
          deps.log.warn(
            { err },
            'store scrub: recording when the next pass is due failed; the timer may start one early',
          ),
      );
    } catch (err) {
      report.status = signal.aborted ? 'stopped' : 'failed';
      report.finishedAt = deps.now();
      const code = (err as NodeJS.ErrnoException).code;
      report.error = signal.aborted
        ? 'the node is shutting down'
        : `the pass stopped on an error${typeof code === 'string' ? ` (${code})` : ''}; see the service log`;
      if (!signal.aborted) deps.log.error({ ...fields, err }, 'store scrub: pass failed');
    } finally {
      await giveBackLease(deps.database, SCRUB_LEASE, deps.nodeId).catch((err: unknown) =>
        deps.log.warn({ err }, 'store scrub: giving back the lease failed; it expires'),
      );
    }
    deps.log.info(
      {
        ...fields,
        status: report.status,
        checked: report.checked,
        bytes_read: report.bytesRead,
        corrupt: report.corrupt,
        moved: report.moved,
        missing: report.missing,
        unreadable: report.unreadable,
        ms: report.finishedAt - report.startedAt,
      },
      'store scrub: pass ended',
    );
  }

  /** Whether the next background pass is due; a store seen for the first time is due an interval from now. */
  async function due(): Promise<boolean> {
    const next = await readLease(deps.database, SCRUB_DUE_LEASE);
    if (next === undefined) {
      await setLease(deps.database, SCRUB_DUE_LEASE, deps.nodeId, deps.now() + deps.intervalMs);
      return false;
    }
    return next.expiresAt <= deps.now();
  }

  async function tick(): Promise<void> {
    if (current || stopped || !(await due())) return;
    await begin('schedule');
  }

  return {
    async request() {
      // Only a background start finds nothing to do.
      return (await begin('request'))!;
    },
    latest: () => current?.pass ?? last,
    start() {
      if (deps.intervalMs <= 0) return;
      const look = () =>
        void tick().catch((err: unknown) =>
          deps.log.error({ err }, 'store scrub: looking whether a pass is due failed'),
        );
      timer = setInterval(look, Math.min(deps.intervalMs, TICK_MS));
      timer.unref();
      look();
    },
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      await starting;
      current?.abort.abort();
      await current?.pass.ended;
    },
  };
}
