import { alias } from 'drizzle-orm/pg-core';
import { and, asc, eq, getTableColumns, inArray, isNull, lt, or, sql, type SQL } from 'drizzle-orm';
import { prepared } from '../db/prepared.js';
import { jobError, type JobError } from '../job-errors.js';
import {
  isUniqueViolation,
  type Database,
  type JobRow,
  type JobStatus,
  type NewJobRow,
  type Queryable,
} from '../db/database.js';
import { NO_KEY_IDENTITY } from './key-identity.js';

/**
 * The job queue: job rows and every state change they go through, on either database, for any
 * number of nodes.
 *
 *   queued ──claim──▶ running ──▶ done | failed | canceled
 *     │                  ├──(lease expired: node dead)──▶ queued again, or failed when attempts are spent
 *     │                  ├──(job function threw)──▶ queued again, or failed when attempts are spent
 *     │                  └──(shutdown)──▶ queued again, the attempt not counted
 *     └──cancel──▶ canceled
 *
 * A claim gives the node a lease (lock_owner, lease_expires_at) that it renews while it runs the
 * job; any node takes back a running job whose lease has run out. Only the lease holder can end
 * a running job. A job submitted while another job of the same API key (jobs.api_key_id) for the
 * same URL is queued or running "follows" it (follows_job_id): it is never claimed, and ends with
 * its leader's outcome; a running job that finds another running job of its key downloading the
 * same media becomes its follower too. Single flight stays within a key: a follower waits for its
 * leader's turn and takes its leader's outcome, so another key's job would wait behind this key's
 * backlog, fail for this key's reasons (its storage allowance) and learn what this key fetches.
 * Jobs of different keys each download; the content store keeps one copy of equal bytes. Unique
 * partial indexes make both hold across nodes: one active leader per key and URL, one running
 * download per key and media. Each transition is one conditional UPDATE (its RETURNING says
 * whether it happened), so a transition that lost a race changes nothing.
 */
export const FINAL_STATUSES: ReadonlySet<JobStatus> = new Set(['done', 'failed', 'canceled']);
/** 'listed': a collection waiting for its children (./collection/parent.ts); a source job never is. */
const ACTIVE: JobStatus[] = ['queued', 'running', 'listed'];

/**
 * The conditions of the partial claim and lease indexes (src/db/schema), written into the SQL
 * rather than bound: PostgreSQL's generic plan of a prepared statement cannot see a parameter's
 * value, so `status = $1` could not use an index that holds only queued (or running) jobs.
 */
const isQueued = (jobs: Queryable['t']['jobs']) => sql`${jobs.status} = 'queued'`;
const isRunning = (jobs: Queryable['t']['jobs']) => sql`${jobs.status} = 'running'`;

export interface Lease {
  /** The node taking or holding the lease. */
  owner: string;
  now: number;
  leaseMs: number;
}

/** Who finished along with a leader: its followers, in the status they were given. */
export interface Ended {
  job: JobRow;
  followers: JobRow[];
}

export async function getJobRow(q: Queryable, id: string): Promise<JobRow | undefined> {
  const query = prepared(q, 'job_by_id', ({ db, t }) =>
    db
      .select()
      .from(t.jobs)
      .where(eq(t.jobs.id, sql.placeholder('id')))
      .prepare('job_by_id'),
  );
  const [row] = await query.execute({ id });
  return row;
}

/** Inserts a job exactly as given (a born-done job, say). */
export async function insertJob(q: Queryable, job: NewJobRow): Promise<JobRow> {
  const [row] = await q.db.insert(q.t.jobs).values(job).returning();
  return row!;
}

export interface BornDoneJob {
  id: string;
  url: string;
  urlKey: string;
  contentId: string;
  /** Created, started and finished at once. */
  at: number;
  requestId: string | null;
  /** The submitting key's identity (./key-identity.ts). */
  apiKeyId: string;
}

/**
 * Inserts a job that is done as it is made: its URL's content is already stored. It shows what its
 * URL's alias says of the source (its `media`), read by the insert itself.
 */
export async function insertBornDoneJob(q: Queryable, job: BornDoneJob): Promise<JobRow> {
  const query = prepared(q, 'insert_born_done_job', ({ db, t: { jobs, aliases } }) => {
    const at = sql.placeholder('at');
    const aliasMedia = db
      .select({ media: aliases.media })
      .from(aliases)
      .where(and(eq(aliases.kind, 'url'), eq(aliases.key, sql.placeholder('urlKey'))));
    return db
      .insert(jobs)
      .values({
        id: sql.placeholder('id'),
        url: sql.placeholder('url'),
        urlKey: sql.placeholder('urlKey'),
        status: 'done',
        bornDone: true,
        contentId: sql.placeholder('contentId'),
        createdAt: at,
        startedAt: at,
        finishedAt: at,
        requestId: sql.placeholder('requestId'),
        apiKeyId: sql.placeholder('apiKeyId'),
        media: sql`(${aliasMedia})`,
      })
      .returning()
      .prepare('insert_born_done_job');
  });
  const [row] = await query.execute({ ...job });
  return row!;
}

/**
 * PostgreSQL: a born-done job in one round trip and no transaction of the caller's, by the
 * migrations' born_done_job() (drizzle/postgres/0012_source_media.sql): under the
 * content's 'use' lock, if the URL's alias still points to this content and it is still stored,
 * its use is recorded and the job inserted. Undefined when the alias moved or the content went.
 * One round trip, where a transaction of the caller's would take six (BEGIN, four statements,
 * COMMIT), each a socket write of node's.
 */
export async function insertBornDoneJobLocked(q: Queryable, job: BornDoneJob): Promise<JobRow | undefined> {
  const query = prepared(q, 'born_done_job', ({ db, t: { jobs } }) => {
    const arg = (name: keyof BornDoneJob) => sql.placeholder(name);
    const call = sql`born_done_job(${arg('id')}, ${arg('url')}, ${arg('urlKey')}, ${arg('contentId')}, ${arg('at')}, ${arg('requestId')}, ${arg('apiKeyId')})`;
    return db.select(jobsColumnsOf(jobs)).from(call).prepare('born_done_job');
  });
  const [row] = await query.execute({ ...job });
  return row;
}

/**
 * insertBornDoneJobLocked for many jobs in one round trip and one commit, by the migrations'
 * born_done_jobs() (drizzle/postgres/0012_source_media.sql), which takes the items in
 * the order given: sorted here by content id, as lockContent takes its locks. The jobs made, by id.
 */
export async function insertBornDoneJobsLocked(q: Queryable, jobs: BornDoneJob[]): Promise<Map<string, JobRow>> {
  const query = prepared(q, 'born_done_jobs', ({ db, t }) =>
    db
      .select(jobsColumnsOf(t.jobs))
      .from(sql`born_done_jobs(${sql.placeholder('jobs')}::jsonb)`)
      .prepare('born_done_jobs'),
  );
  const inLockOrder = [...jobs].sort((a, b) => (a.contentId < b.contentId ? -1 : a.contentId > b.contentId ? 1 : 0));
  const rows = await query.execute({ jobs: JSON.stringify(inLockOrder) });
  return new Map(rows.map((row) => [row.id, row]));
}

/**
 * insertBornDoneJobsLocked's result for each job, in order. One commit for all: if it fails, each
 * job goes again alone, so that whatever failed it fails only its own (a promise of its own).
 */
export async function insertBornDoneJobsOrEachAlone(
  q: Queryable,
  jobs: BornDoneJob[],
): Promise<Array<Promise<JobRow | undefined> | JobRow | undefined>> {
  try {
    const made = await insertBornDoneJobsLocked(q, jobs);
    return jobs.map((job) => made.get(job.id));
  } catch (err) {
    if (jobs.length === 1) throw err;
    return jobs.map((job) => insertBornDoneJobLocked(q, job));
  }
}

/**
 * The columns of a function's jobs rows, each mapped as the table's column is: so that a call of
 * the function is a prepared select. (A raw execute() is not prepared, and postgres.js then asks
 * PostgreSQL for its parameters' types first: a round trip more.)
 */
function jobsColumnsOf(jobs: Queryable['t']['jobs']): { [K in keyof JobRow]: SQL<JobRow[K]> } {
  const columns = Object.entries(getTableColumns(jobs)).map(([key, column]) => [
    key,
    sql`${sql.identifier(column.name)}`.mapWith(column),
  ]);
  return Object.fromEntries(columns) as { [K in keyof JobRow]: SQL<JobRow[K]> };
}

/** The job of key `apiKeyId` that currently leads work on a URL, if any (the one-leader index's condition, written in). */
export async function activeLeaderFor(q: Queryable, urlKey: string, apiKeyId: string): Promise<JobRow | undefined> {
  const { jobs } = q.t;
  const [row] = await q.db
    .select()
    .from(jobs)
    .where(
      and(
        eq(jobs.apiKeyId, apiKeyId),
        eq(jobs.urlKey, urlKey),
        sql`${jobs.status} in ('queued', 'running')`,
        isNull(jobs.followsJobId),
      ),
    );
  return row;
}

/**
 * Queues a job for its URL: as the leader, or, when another job of the same key leads that URL,
 * as its follower (another key's job never follows: it leads its own download). The leader's row
 * is locked while the follower is added, so the leader cannot end in between and leave the
 * follower waiting for nothing. Returns undefined when the leader ended meanwhile: the caller
 * starts over (the URL may now have content).
 */
export async function enqueueJob(
  database: Database,
  job: Omit<NewJobRow, 'status' | 'followsJobId'>,
): Promise<JobRow | undefined> {
  const apiKeyId = job.apiKeyId ?? NO_KEY_IDENTITY;
  const asLeader = await database.transaction(async (q) => {
    // Any conflict is the one-leader-per-key-and-URL index (ids are random UUIDs).
    const [row] = await q.db
      .insert(q.t.jobs)
      .values({ ...job, status: 'queued', followsJobId: null })
      .onConflictDoNothing()
      .returning();
    return row;
  });
  if (asLeader) return asLeader;
  return database.transaction(async (q) => {
    const leader = await activeLeaderFor(q, job.urlKey, apiKeyId);
    if (!leader || !(await lockIfActive(q, leader.id))) return undefined;
    return insertJob(q, { ...job, apiKeyId, status: 'queued', followsJobId: leader.id });
  });
}

/**
 * Locks a job's row (Postgres; SQLite transactions are exclusive); its key's identity while it is
 * still active, otherwise undefined.
 */
async function lockIfActive(q: Queryable, id: string): Promise<{ apiKeyId: string } | undefined> {
  const { jobs } = q.t;
  const query = q.db.select({ status: jobs.status, apiKeyId: jobs.apiKeyId }).from(jobs).where(eq(jobs.id, id));
  const [row] = q.kind === 'postgres' ? await query.for('update') : await query;
  return row !== undefined && ACTIVE.includes(row.status) ? { apiKeyId: row.apiKeyId } : undefined;
}

/**
 * Atomically takes a claimable job, with a lease, taking turns across API keys (jobs.api_key_id)
 * so that one key's bulk cannot hold every worker while another key's jobs wait: of the keys with
 * queued jobs, the one with the fewest jobs running (on every node), then the one whose last claim
 * is oldest (key_claims; never claimed: first), then the one whose oldest job is oldest; and of
 * that key, its oldest job. When another node is taking that job at the same moment (PostgreSQL
 * skips the row it locked), the next key in turn is tried. The claim then records the key's turn.
 * Choosing the key groups the queued jobs by key along the claim index and orders the keys, not
 * the jobs; taking the key's job walks the claim index. Given the database, all of it is one
 * transaction; given a transaction, it joins it.
 *
 * The statements are prepared (../db/prepared.ts), as are the queries a node makes for its running
 * jobs every second or so (renewLeases, heldLeases): a statement sent unprepared is built anew by drizzle
 * each time, and PostgreSQL describes it in a round trip of its own before running it.
 */
export async function claimNextJob(q: Queryable | Database, lease: Lease): Promise<JobRow | undefined> {
  const claim = async (t: Queryable) => {
    for (const apiKeyId of await keysInTurn(t)) {
      const job = await claimOldestOfKey(t, apiKeyId, lease);
      if (job) {
        await recordKeyTurn(t, apiKeyId, lease.now);
        return job;
      }
    }
    return undefined;
  };
  // One transaction, one commit (and on SQLite one sync) for the claim and its turn; every step
  // takes the handle.
  return 'transaction' in q ? q.transaction(claim, { handleOnly: true }) : claim(q);
}

/** The keys with claimable jobs, in the order of their turns (see claimNextJob). */
async function keysInTurn(q: Queryable): Promise<string[]> {
  const query = prepared(q, 'keys_in_turn', ({ db, t: { jobs, keyClaims } }) => {
    const waiting = db
      .select({ apiKeyId: jobs.apiKeyId, firstAt: sql<number>`min(${jobs.createdAt})`.as('first_at') })
      .from(jobs)
      .where(and(isQueued(jobs), isNull(jobs.followsJobId)))
      .groupBy(jobs.apiKeyId)
      .as('waiting');
    const others = alias(jobs, 'running_jobs');
    const running = db
      .select({ apiKeyId: others.apiKeyId, count: sql<number>`count(*)`.as('running') })
      .from(others)
      .where(sql`${others.status} = 'running'`)
      .groupBy(others.apiKeyId)
      .as('running_by_key');
    return db
      .select({ apiKeyId: waiting.apiKeyId })
      .from(waiting)
      .leftJoin(running, eq(running.apiKeyId, waiting.apiKeyId))
      .leftJoin(keyClaims, eq(keyClaims.apiKeyId, waiting.apiKeyId))
      .orderBy(sql`coalesce(${running.count}, 0)`, sql`coalesce(${keyClaims.lastClaimedAt}, 0)`, asc(waiting.firstAt))
      .prepare('keys_in_turn');
  });
  return (await query.execute()).map((row) => row.apiKeyId);
}

/** Claims the key's oldest claimable job, unless another node is taking it (PostgreSQL). */
async function claimOldestOfKey(q: Queryable, apiKeyId: string, lease: Lease): Promise<JobRow | undefined> {
  const query = prepared(q, 'claim_next_job', ({ db, t: { jobs }, kind }) => {
    const oldest = db
      .select({ id: jobs.id })
      .from(jobs)
      .where(and(isQueued(jobs), isNull(jobs.followsJobId), eq(jobs.apiKeyId, sql.placeholder('apiKeyId'))))
      .orderBy(asc(jobs.createdAt))
      .limit(1);
    // Postgres: nodes claiming at once each skip the row another is taking instead of queueing on
    // it. A scalar subquery, evaluated once: as `id IN (...)` Postgres may run it again per row and
    // take more than one job.
    const next = kind === 'postgres' ? oldest.for('update', { skipLocked: true }) : oldest;
    return db
      .update(jobs)
      .set({
        status: 'running',
        lockOwner: sql`${sql.placeholder('owner')}`,
        leaseExpiresAt: sql`${sql.placeholder('leaseExpiresAt')}`,
        startedAt: sql`${sql.placeholder('now')}`,
        attempts: sql`${jobs.attempts} + 1`,
        progressBytes: null,
        progressTotalBytes: null,
      })
      .where(and(eq(jobs.id, sql`(${next})`), eq(jobs.status, 'queued')))
      .returning()
      .prepare('claim_next_job');
  });
  const [row] = await query.execute({
    apiKeyId,
    owner: lease.owner,
    leaseExpiresAt: lease.now + lease.leaseMs,
    now: lease.now,
  });
  return row;
}

/** The key whose job was just claimed had its turn at `at` (key_claims). */
async function recordKeyTurn(q: Queryable, apiKeyId: string, at: number): Promise<void> {
  const query = prepared(q, 'record_key_turn', ({ db, t: { keyClaims } }) =>
    db
      .insert(keyClaims)
      .values({ apiKeyId: sql.placeholder('apiKeyId'), lastClaimedAt: sql.placeholder('at') })
      .onConflictDoUpdate({ target: keyClaims.apiKeyId, set: { lastClaimedAt: sql`excluded.last_claimed_at` } })
      .prepare('record_key_turn'),
  );
  await query.execute({ apiKeyId, at });
}

/** What a running job has downloaded: bytes, of the total when the source announced one. */
export interface Progress {
  bytes: number;
  totalBytes: number | null;
}

/**
 * Extends the leases of the jobs `ids` that `owner` still holds, and records the progress given
 * for some of them (the others keep theirs): one statement for a node's jobs. Returns the ids
 * held. A job missing from the answer was canceled, or taken back after its lease ran out: its
 * node must stop it.
 */
export async function renewLeases(
  q: Queryable,
  ids: string[],
  lease: Lease,
  progress: ReadonlyMap<string, Progress> = new Map(),
): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const query = prepared(q, 'renew_leases', ({ db, t: { jobs }, kind }) => {
    // One statement for any number of ids: an array on PostgreSQL, a JSON array on SQLite. The
    // progress: a JSON object, each id's [bytes, total].
    const given = sql.placeholder('progress');
    const listed =
      kind === 'postgres'
        ? sql`${jobs.id} = any(${sql.placeholder('ids')})`
        : sql`${jobs.id} in (select value from json_each(${sql.placeholder('ids')}))`;
    const [progressOf, bytesOf, totalOf] =
      kind === 'postgres'
        ? [
            sql`(${given}::jsonb -> ${jobs.id})`,
            sql`(${given}::jsonb -> ${jobs.id} ->> 0)::bigint`,
            sql`(${given}::jsonb -> ${jobs.id} ->> 1)::bigint`,
          ]
        : [
            sql`json_type(${given}, '$."' || ${jobs.id} || '"')`,
            sql`json_extract(${given}, '$."' || ${jobs.id} || '"[0]')`,
            sql`json_extract(${given}, '$."' || ${jobs.id} || '"[1]')`,
          ];
    return db
      .update(jobs)
      .set({
        leaseExpiresAt: sql`${sql.placeholder('leaseExpiresAt')}`,
        progressBytes: sql`case when ${progressOf} is null then ${jobs.progressBytes} else ${bytesOf} end`,
        progressTotalBytes: sql`case when ${progressOf} is null then ${jobs.progressTotalBytes} else ${totalOf} end`,
      })
      .where(and(listed, eq(jobs.lockOwner, sql.placeholder('owner')), eq(jobs.status, 'running')))
      .returning({ id: jobs.id })
      .prepare('renew_leases');
  });
  const given = Object.fromEntries([...progress].map(([id, { bytes, totalBytes }]) => [id, [bytes, totalBytes]]));
  const rows = await query.execute({
    ids: q.kind === 'postgres' ? ids : JSON.stringify(ids),
    leaseExpiresAt: lease.now + lease.leaseMs,
    owner: lease.owner,
    progress: JSON.stringify(given),
  });
  return new Set(rows.map((row) => row.id));
}

/** Of the jobs `ids`, those `owner` still holds (a read: renewLeases without writing). */
export async function heldLeases(q: Queryable, ids: string[], owner: string): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const query = prepared(q, 'held_leases', ({ db, t: { jobs }, kind }) => {
    const listed =
      kind === 'postgres'
        ? sql`${jobs.id} = any(${sql.placeholder('ids')})`
        : sql`${jobs.id} in (select value from json_each(${sql.placeholder('ids')}))`;
    return db
      .select({ id: jobs.id })
      .from(jobs)
      .where(and(listed, eq(jobs.lockOwner, sql.placeholder('owner')), eq(jobs.status, 'running')))
      .prepare('held_leases');
  });
  const rows = await query.execute({ ids: q.kind === 'postgres' ? ids : JSON.stringify(ids), owner });
  return new Set(rows.map((row) => row.id));
}

export async function countQueued(q: Queryable): Promise<number> {
  const [row] = await q.db
    .select({ n: sql<number>`cast(count(*) as integer)` })
    .from(q.t.jobs)
    .where(isQueued(q.t.jobs));
  return Number(row?.n ?? 0);
}

/**
 * What the extraction said of the job's media: its extractor and id, and the record's `media`
 * (JSON, src/tools/media-metadata.ts), shown while the job runs.
 */
export async function recordMediaIdentity(
  q: Queryable,
  id: string,
  identity: { extractor: string; mediaId: string; media: string },
): Promise<void> {
  await q.db.update(q.t.jobs).set(identity).where(eq(q.t.jobs.id, id));
}

/**
 * Claims the download of a media for a running job of key `apiKeyId` (the job's own): records its
 * media key, which only one running job of each key may hold. Returns 'claimed', or the id of the
 * running job of the same key that holds it (this job should follow it), or 'lost' when this job
 * is no longer running under `owner`. Another key's download of the same media does not count.
 */
export async function claimMediaDownload(
  database: Database,
  job: { id: string; apiKeyId: string },
  owner: string,
  mediaKey: string,
): Promise<'claimed' | 'lost' | { followId: string }> {
  const { id, apiKeyId } = job;
  const { jobs } = database.t;
  try {
    const rows = await database.db
      .update(jobs)
      .set({ mediaKey })
      .where(and(eq(jobs.id, id), eq(jobs.status, 'running'), eq(jobs.lockOwner, owner)))
      .returning({ id: jobs.id });
    return rows.length > 0 ? 'claimed' : 'lost';
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
  }
  const [holder] = await database.db
    .select({ id: jobs.id })
    .from(jobs)
    .where(and(eq(jobs.apiKeyId, apiKeyId), eq(jobs.mediaKey, mediaKey), eq(jobs.status, 'running')));
  // The holder ended in between: try once more, the key is free or the alias is there.
  return holder ? { followId: holder.id } : claimMediaDownload(database, job, owner, mediaKey);
}

/**
 * running → queued as a follower of `leaderId`, which is downloading the same media for the same
 * key; this job's own followers follow the leader too. False when the leader is no longer active,
 * is another key's, or this job is no longer ours: the caller goes on by itself.
 */
export async function followMediaDownload(
  database: Database,
  id: string,
  owner: string,
  leaderId: string,
): Promise<boolean> {
  return database.transaction(async (q) => {
    const { jobs } = q.t;
    const leader = await lockIfActive(q, leaderId);
    if (!leader) return false;
    const moved = await q.db
      .update(jobs)
      .set({
        status: 'queued',
        followsJobId: leaderId,
        lockOwner: null,
        leaseExpiresAt: null,
        progressBytes: null,
        progressTotalBytes: null,
      })
      .where(
        and(eq(jobs.id, id), eq(jobs.status, 'running'), eq(jobs.lockOwner, owner), eq(jobs.apiKeyId, leader.apiKeyId)),
      )
      .returning({ id: jobs.id });
    if (moved.length === 0) return false;
    await q.db.update(jobs).set({ followsJobId: leaderId }).where(eq(jobs.followsJobId, id));
    return true;
  });
}

/**
 * PostgreSQL: locks, in id order, the collections of jobs `ids` and of their queued followers,
 * before a transaction ends or cancels them. The trigger of drizzle/postgres/0014_collections.sql
 * locks a child's collection as the child's row changes; a leader and its followers may be children
 * of different collections, so two such ends at once would take the same two collections in
 * opposite orders and deadlock. Every end takes them first, in one order.
 */
async function lockCollectionsOf(q: Queryable, ids: string[]): Promise<void> {
  if (q.kind !== 'postgres' || ids.length === 0) return;
  const { jobs } = q.t;
  const ended = q.db
    .select({ parentId: jobs.parentId })
    .from(jobs)
    .where(or(inArray(jobs.id, ids), and(inArray(jobs.followsJobId, ids), eq(jobs.status, 'queued'))));
  await q.db.select({ id: jobs.id }).from(jobs).where(inArray(jobs.id, ended)).orderBy(asc(jobs.id)).for('update');
}

/**
 * running → done, with every follower. `storedBytes`: the new content the job put into the store,
 * which counts against its key's allowance (src/store/key-allowance.ts); null when it stored none.
 * `media`: what the job knows of its source once converted (the record's `media` in JSON), kept
 * as recorded at its extraction when not given; a follower keeps its own (it extracted the same
 * media through another URL), or takes the job's. Undefined when the job was no longer running
 * under `owner`.
 */
export async function markDone(
  q: Queryable,
  id: string,
  owner: string,
  contentId: string,
  now: number,
  storedBytes: number | null = null,
  media?: string,
): Promise<Ended | undefined> {
  const { jobs } = q.t;
  await lockCollectionsOf(q, [id]);
  const [job] = await q.db
    .update(jobs)
    .set({
      status: 'done',
      contentId,
      finishedAt: now,
      lockOwner: null,
      leaseExpiresAt: null,
      storedBytes,
      ...(media === undefined ? {} : { media }),
    })
    .where(and(eq(jobs.id, id), eq(jobs.status, 'running'), eq(jobs.lockOwner, owner)))
    .returning();
  if (!job) return undefined;
  const followers = await q.db
    .update(jobs)
    .set({
      status: 'done',
      contentId,
      finishedAt: now,
      startedAt: sql`coalesce(${jobs.startedAt}, ${now})`,
      media: sql`coalesce(${jobs.media}, ${job.media})`,
    })
    .where(and(eq(jobs.followsJobId, id), eq(jobs.status, 'queued')))
    .returning();
  return { job, followers };
}

/** running → failed, with every follower. Undefined when the job was no longer running under `owner`. */
export async function markFailed(
  q: Queryable,
  id: string,
  owner: string,
  error: JobError,
  now: number,
): Promise<Ended | undefined> {
  const { jobs } = q.t;
  await lockCollectionsOf(q, [id]);
  const [job] = await q.db
    .update(jobs)
    .set({ ...failedColumns(error, now), lockOwner: null, leaseExpiresAt: null })
    .where(and(eq(jobs.id, id), eq(jobs.status, 'running'), eq(jobs.lockOwner, owner)))
    .returning();
  if (!job) return undefined;
  return { job, followers: await failFollowers(q, id, error, now) };
}

async function failFollowers(q: Queryable, leaderId: string, error: JobError, now: number): Promise<JobRow[]> {
  const { jobs } = q.t;
  return q.db
    .update(jobs)
    .set(failedColumns(error, now))
    .where(and(eq(jobs.followsJobId, leaderId), eq(jobs.status, 'queued')))
    .returning();
}

/** The columns of a job that ends failed with `error`. */
function failedColumns(error: JobError, now: number) {
  return {
    status: 'failed' as const,
    errorCode: error.code,
    errorMessage: error.message,
    errorDetail: error.detail,
    errorHttpStatus: error.httpStatus,
    finishedAt: now,
  };
}

/**
 * queued, running (or a collection's listed) → canceled. A canceled leader hands its followers on
 * (handOnFollowers), so one client's cancel never cancels another client's job, and a follower goes
 * on following only a job of its own key. Returns the row
 * after the change (and what it was before), or undefined if there is no such job.
 */
export async function markCanceled(
  database: Database,
  id: string,
  now: number,
): Promise<{ before: JobRow; after: JobRow } | undefined> {
  return database.transaction(async (q) => {
    const { jobs } = q.t;
    const before = await getJobRow(q, id);
    if (!before) return undefined;
    await lockCollectionsOf(q, [id]);
    const [changed] = await q.db
      .update(jobs)
      .set({ status: 'canceled', finishedAt: now, lockOwner: null, leaseExpiresAt: null })
      .where(and(eq(jobs.id, id), inArray(jobs.status, ACTIVE)))
      .returning();
    if (!changed) return { before, after: (await getJobRow(q, id))! };
    await handOnFollowers(q, id);
    return { before, after: changed };
  });
}

/** How many of a collection's children one transaction of cancelActiveChildren cancels. */
export const CHILDREN_PER_CANCEL = 200;

/**
 * Cancels a collection's queued and running children, CHILDREN_PER_CANCEL to a transaction (each
 * handing on its followers as markCanceled does), until none is left. Each canceled child with the
 * status it had: a running one's node must be told to stop it.
 */
export async function cancelActiveChildren(
  database: Database,
  parentId: string,
  now: number,
): Promise<Array<{ wasRunning: boolean; job: JobRow }>> {
  const canceled: Array<{ wasRunning: boolean; job: JobRow }> = [];
  for (;;) {
    const batch = await database.transaction(async (q) => {
      const { jobs } = q.t;
      // The collection first, as every end takes it (lockCollectionsOf); then its children in id order.
      if (q.kind === 'postgres')
        await q.db.select({ id: jobs.id }).from(jobs).where(eq(jobs.id, parentId)).for('update');
      const active = q.db
        .select({ id: jobs.id, status: jobs.status })
        .from(jobs)
        .where(and(eq(jobs.parentId, parentId), inArray(jobs.status, ['queued', 'running'])))
        .orderBy(asc(jobs.id))
        .limit(CHILDREN_PER_CANCEL);
      const rows = q.kind === 'postgres' ? await active.for('update') : await active;
      if (rows.length === 0) return [];
      const changed = await q.db
        .update(jobs)
        .set({ status: 'canceled', finishedAt: now, lockOwner: null, leaseExpiresAt: null })
        .where(
          and(
            inArray(
              jobs.id,
              rows.map((row) => row.id),
            ),
            inArray(jobs.status, ['queued', 'running']),
          ),
        )
        .returning();
      const running = new Set(rows.filter((row) => row.status === 'running').map((row) => row.id));
      for (const job of changed) await handOnFollowers(q, job.id);
      return changed.map((job) => ({ wasRunning: running.has(job.id), job }));
    });
    if (batch.length === 0) return canceled;
    canceled.push(...batch);
  }
}

/**
 * A canceled leader's followers, key by key: the oldest of a key becomes its new leader (queued,
 * claimable) and the key's others follow it; when a job of that key already leads the heir's URL,
 * the key's followers follow that job instead.
 */
async function handOnFollowers(q: Queryable, id: string): Promise<void> {
  const { jobs } = q.t;
  const followers = await q.db
    .select({ id: jobs.id, apiKeyId: jobs.apiKeyId, urlKey: jobs.urlKey })
    .from(jobs)
    .where(and(eq(jobs.followsJobId, id), eq(jobs.status, 'queued')))
    .orderBy(asc(jobs.createdAt));
  // Each key's new leader, and the followers that follow it.
  const heirs = new Map<string, { id: string; followers: string[] }>();
  for (const follower of followers) {
    const heir = heirs.get(follower.apiKeyId);
    if (heir) {
      heir.followers.push(follower.id);
      continue;
    }
    // Locked as enqueueJob locks a leader: it cannot end before its new followers are recorded.
    const leading = await activeLeaderFor(q, follower.urlKey, follower.apiKeyId);
    if (leading && (await lockIfActive(q, leading.id))) {
      heirs.set(follower.apiKeyId, { id: leading.id, followers: [follower.id] });
    } else {
      await q.db.update(jobs).set({ followsJobId: null }).where(eq(jobs.id, follower.id));
      heirs.set(follower.apiKeyId, { id: follower.id, followers: [] });
    }
  }
  for (const heir of heirs.values()) {
    if (heir.followers.length > 0)
      await q.db.update(jobs).set({ followsJobId: heir.id }).where(inArray(jobs.id, heir.followers));
  }
}

/** running → queued, for a job a shutdown interrupted; the attempt does not count. */
export async function requeueInterrupted(q: Queryable, id: string, owner: string): Promise<void> {
  const { jobs } = q.t;
  await q.db
    .update(jobs)
    .set({
      status: 'queued',
      lockOwner: null,
      leaseExpiresAt: null,
      startedAt: null,
      mediaKey: null,
      progressBytes: null,
      progressTotalBytes: null,
      attempts: sql`case when ${jobs.attempts} > 0 then ${jobs.attempts} - 1 else 0 end`,
    })
    .where(and(eq(jobs.id, id), eq(jobs.status, 'running'), eq(jobs.lockOwner, owner)));
}

/**
 * running → queued, for a job whose job function threw: the node gives the job back at once
 * instead of holding it until its lease runs out. The attempt counts; past `maxAttempts` the job
 * fails (attempts_exhausted), followers with it.
 */
export async function releaseJob(
  database: Database,
  id: string,
  owner: string,
  maxAttempts: number,
  now: number,
): Promise<Ended | undefined> {
  return database.transaction(async (q) => {
    const { jobs } = q.t;
    await lockCollectionsOf(q, [id]);
    const mine = and(eq(jobs.id, id), eq(jobs.status, 'running'), eq(jobs.lockOwner, owner));
    const exhausted = await exhaust(q, and(mine, sql`${jobs.attempts} >= ${maxAttempts}`)!, maxAttempts, now);
    if (exhausted.length > 0) return exhausted[0];
    await q.db
      .update(jobs)
      .set({
        status: 'queued',
        lockOwner: null,
        leaseExpiresAt: null,
        mediaKey: null,
        progressBytes: null,
        progressTotalBytes: null,
      })
      .where(mine);
    return undefined;
  });
}

/**
 * Takes back running jobs whose lease has run out (their node died or lost the database): queued
 * again while they have attempts left, failed (attempts_exhausted) otherwise, followers with them.
 * Any node may run it at any time; each row changes once. Returns the jobs that failed.
 */
export async function reclaimExpiredLeases(
  database: Database,
  maxAttempts: number,
  now: number,
): Promise<{ requeued: number; failed: Ended[] }> {
  return database.transaction(async (q) => {
    const { jobs } = q.t;
    const expired = and(isRunning(jobs), or(isNull(jobs.leaseExpiresAt), lt(jobs.leaseExpiresAt, now)));
    const failed = await exhaust(q, and(expired, sql`${jobs.attempts} >= ${maxAttempts}`)!, maxAttempts, now);
    const requeued = await q.db
      .update(jobs)
      .set({
        status: 'queued',
        lockOwner: null,
        leaseExpiresAt: null,
        mediaKey: null,
        progressBytes: null,
        progressTotalBytes: null,
      })
      .where(expired)
      .returning({ id: jobs.id });
    return { requeued: requeued.length, failed };
  });
}

/**
 * Ends at once the leases of running jobs whose holder is provably gone, so that the next sweep
 * takes them back without waiting their leases out: on SQLite every running job's (the file's
 * lock proves that no other process of the service uses it, ../db/sqlite-lock.ts), on PostgreSQL
 * those whose holder `isGone` says is (this node's own NODE_ID from before a restart, a dead
 * process of this machine). Run at start, before this node holds any lease. Returns how many.
 */
export async function expireLeasesOfGoneHolders(q: Queryable, isGone: (owner: string) => boolean): Promise<number> {
  const { jobs } = q.t;
  const holders = await q.db.selectDistinct({ owner: jobs.lockOwner }).from(jobs).where(isRunning(jobs));
  const gone = holders
    .map((row) => row.owner)
    .filter((owner): owner is string => owner !== null && (q.kind === 'sqlite' || isGone(owner)));
  if (gone.length === 0) return 0;
  const expired = await q.db
    .update(jobs)
    .set({ leaseExpiresAt: 0 })
    .where(and(isRunning(jobs), inArray(jobs.lockOwner, gone)))
    .returning({ id: jobs.id });
  return expired.length;
}

/**
 * A collection that is 'listed' holds this as its lock_owner (no node does) until its end is
 * announced: the trigger that ends it with its last child cannot tell any node, so whoever hears of
 * a child's end takes the marker off, once (./collection/parent.ts, claimEndedParents).
 */
export const END_UNANNOUNCED = 'collection:end-unannounced';

/**
 * A collection whose listing was cut short ends as a listing that failed does (./collection/parent.ts,
 * endListing): failed when it found no entry; otherwise it keeps its children and waits for them
 * (listed), or is done when they have all ended; the error is its listing_error.
 */
function exhaustedColumns(jobs: Queryable['t']['jobs']) {
  const keeps = sql`(${jobs.kind} = 'collection' and ${jobs.entriesFound} > 0)`;
  const waits = sql`(${keeps} and ${jobs.childrenDone} + ${jobs.childrenFailed} + ${jobs.childrenCanceled} < ${jobs.children})`;
  return { keeps, waits };
}

async function exhaust(q: Queryable, where: SQL, maxAttempts: number, now: number): Promise<Ended[]> {
  const { jobs } = q.t;
  // Its followers were never interrupted themselves, but their fetch was, as many times.
  const error = jobError('attempts_exhausted', { values: { attempts: maxAttempts } });
  const { keeps, waits } = exhaustedColumns(jobs);
  const rows = await q.db
    .update(jobs)
    .set({
      ...failedColumns(error, now),
      status: sql`case when ${waits} then 'listed' when ${keeps} then 'done' else 'failed' end`,
      finishedAt: sql`case when ${waits} then null else cast(${now} as bigint) end`,
      lockOwner: sql`case when ${waits} then ${END_UNANNOUNCED} else null end`,
      leaseExpiresAt: null,
      mediaKey: null,
    })
    .where(where)
    .returning();
  const failed = rows.filter((job) => FINAL_STATUSES.has(job.status));
  const ended: Ended[] = [];
  for (const job of failed) {
    ended.push({
      job,
      followers: await failFollowers(q, job.id, error, now),
    });
  }
  return ended;
}
