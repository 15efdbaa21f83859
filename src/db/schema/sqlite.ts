import { sql } from 'drizzle-orm';
import { index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import { JOB_ERROR_CODES } from '../../job-errors.js';
import { ALIAS_KINDS, CALLBACK_STATUSES, JOB_KINDS, JOB_STATUSES } from './model.js';

/**
 * The SQLite schema (the embedded default). Its twin is ./postgres.ts: the same tables, columns,
 * keys and indexes, which test/unit/db-schemas.test.ts checks. Times are milliseconds since the
 * epoch (integers), rendered as ISO strings at the edge.
 */

export const jobs = sqliteTable(
  'jobs',
  {
    id: text('id').primaryKey(),
    url: text('url').notNull(),
    /** The URL normalized as an alias key (src/policy/source-url.ts). */
    urlKey: text('url_key').notNull(),
    status: text('status', { enum: JOB_STATUSES }).notNull(),
    bornDone: integer('born_done', { mode: 'boolean' }).notNull().default(false),
    /** Set while another job of the same key for the same URL or media is queued or running: this one waits for its result. */
    followsJobId: text('follows_job_id'),
    createdAt: integer('created_at').notNull(),
    startedAt: integer('started_at'),
    finishedAt: integer('finished_at'),
    attempts: integer('attempts').notNull().default(0),
    /** The node running the job, while it is running. */
    lockOwner: text('lock_owner'),
    /** While running: the node must renew before this time, or any node may take the job back. */
    leaseExpiresAt: integer('lease_expires_at'),
    progressBytes: integer('progress_bytes'),
    progressTotalBytes: integer('progress_total_bytes'),
    contentId: text('content_id'),
    /** Why it failed (src/job-errors.ts): its stable code, the code's sentence, the specifics, the origin's HTTP status. */
    errorCode: text('error_code', { enum: JOB_ERROR_CODES }),
    errorMessage: text('error_message'),
    errorDetail: text('error_detail'),
    errorHttpStatus: integer('error_http_status'),
    extractor: text('extractor'),
    mediaId: text('media_id'),
    /** The media alias key, once the metadata step named a trusted one (src/store/aliases.ts). */
    mediaKey: text('media_key'),
    /** X-Request-Id of the submission, so the worker's log lines can be tied to it. */
    requestId: text('request_id'),
    /**
     * Who submitted it: a digest of the API key (src/jobs/key-identity.ts), never the key; '' when
     * no key is known. The store's allowance per key and the queue's turns across keys go by it.
     */
    apiKeyId: text('api_key_id').notNull().default(''),
    /** Bytes of new content this job put into the store (none: null); counted against its key's allowance. */
    storedBytes: integer('stored_bytes'),
    /**
     * What the downloader (and the file's tags) said of the source, as the record's `media` in
     * JSON (src/tools/media-metadata.ts); a born-done job's is its URL's alias's.
     */
    media: text('media'),
    /**
     * 'collection': a playlist, album or feed whose entries become child jobs (src/jobs/collection);
     * its url_key is 'collection:' and its id, so that it never takes part in single flight.
     */
    kind: text('kind', { enum: JOB_KINDS }).notNull().default('source'),
    /** A child job: the collection it was listed in. */
    parentId: text('parent_id'),
    /** A collection's: at most this many entries are listed. */
    maxItems: integer('max_items'),
    /** A collection's own title, once listed. */
    collectionTitle: text('collection_title'),
    /** A collection's entries listed so far (items), of which refused ones. */
    entriesFound: integer('entries_found').notNull().default(0),
    itemsRefused: integer('items_refused').notNull().default(0),
    /** A collection's child jobs, and how many of them ended each way: kept by triggers (drizzle/sqlite/0016_collections.sql). */
    children: integer('children').notNull().default(0),
    childrenDone: integer('children_done').notNull().default(0),
    childrenFailed: integer('children_failed').notNull().default(0),
    childrenCanceled: integer('children_canceled').notNull().default(0),
    /** The listing stopped at max_items while more entries may exist. */
    truncated: integer('truncated', { mode: 'boolean' }).notNull().default(false),
    /** A collection's children each get a callback of their own, to the collection's callback_url. */
    itemCallbacks: integer('item_callbacks', { mode: 'boolean' }).notNull().default(false),
  },
  (t) => [
    // Partial: ended jobs, which pile up, are in none of these three, so inserting a born-done job
    // writes three index pages fewer (5.9 pages to the WAL instead of 8.9 on SQLite).
    index('jobs_claim_idx')
      .on(t.status, t.createdAt)
      .where(sql`status = 'queued'`),
    // claimNextJob: each key's queued jobs in their order, so that a key's turn finds its oldest at once.
    index('jobs_claim_key_idx')
      .on(t.apiKeyId, t.createdAt)
      .where(sql`status = 'queued'`),
    index('jobs_lease_idx')
      .on(t.status, t.leaseExpiresAt)
      .where(sql`status = 'running'`),
    index('jobs_url_key_idx').on(t.urlKey, t.status),
    index('jobs_follows_idx')
      .on(t.followsJobId)
      .where(sql`follows_job_id is not null`),
    // Single flight across nodes, within one API key (jobs of different keys never share a
    // download): one leader per key and URL, one download per key and media at a time.
    uniqueIndex('jobs_one_leader_per_url')
      .on(t.apiKeyId, t.urlKey)
      .where(sql`status in ('queued', 'running') and follows_job_id is null`),
    uniqueIndex('jobs_one_download_per_media')
      .on(t.apiKeyId, t.mediaKey)
      .where(sql`status = 'running' and media_key is not null`),
    // A key's stored bytes over the allowance's window: only the jobs that stored new content.
    index('jobs_key_stored_idx')
      .on(t.apiKeyId, t.finishedAt)
      .where(sql`stored_bytes is not null`),
    // A collection's children (cancel).
    index('jobs_parent_idx')
      .on(t.parentId)
      .where(sql`parent_id is not null`),
  ],
);

/**
 * A collection's entries, in its order (index from 1): the child job it got (several entries of
 * one URL share one), or the problem that refused it (JSON: code, message, field errors, fields).
 */
export const collectionItems = sqliteTable(
  'collection_items',
  {
    parentId: text('parent_id').notNull(),
    idx: integer('idx').notNull(),
    url: text('url').notNull(),
    title: text('title'),
    jobId: text('job_id'),
    problem: text('problem'),
  },
  (t) => [primaryKey({ columns: [t.parentId, t.idx] })],
);

/**
 * The ordinary cache row of the specification: one per stored artifact, mapping a kind
 * ('source_wav') to its result reference (content id and file name). last_used_at orders
 * least-recently-used eviction.
 */
export const cacheEntries = sqliteTable(
  'cache_entries',
  {
    contentId: text('content_id').notNull(),
    name: text('name').notNull(),
    kind: text('kind').notNull(),
    bytes: integer('bytes').notNull(),
    contentType: text('content_type').notNull(),
    sampleRate: integer('sample_rate'),
    channels: integer('channels'),
    durationS: real('duration_s'),
    /** EBU R128 loudness of the content, on its audio.wav row (null: not measured, or silent). */
    loudnessIntegratedLufs: real('loudness_integrated_lufs'),
    loudnessRangeLu: real('loudness_range_lu'),
    loudnessTruePeakDbtp: real('loudness_true_peak_dbtp'),
    createdAt: integer('created_at').notNull(),
    lastUsedAt: integer('last_used_at').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.contentId, t.name] }),
    // Eviction's exact order and keyset cursor: the database walks it and stops at the batch's LIMIT.
    index('cache_entries_lru_idx').on(t.lastUsedAt, t.contentId, t.name),
  ],
);

/**
 * Aliases to content: kind 'url' keys a normalized submitted URL; kind 'media' keys the
 * downloader's extractor, site and media id, so that another URL of the same media is recognised
 * before anything is downloaded.
 */
export const aliases = sqliteTable(
  'aliases',
  {
    kind: text('kind', { enum: ALIAS_KINDS }).notNull(),
    key: text('key').notNull(),
    contentId: text('content_id').notNull(),
    createdAt: integer('created_at').notNull(),
    /** A 'url' alias: the source's `media` (JSON) as the job that stored it for this URL knew it; null otherwise. */
    media: text('media'),
  },
  (t) => [primaryKey({ columns: [t.kind, t.key] }), index('aliases_content_idx').on(t.contentId)],
);

/**
 * One row (id 1) with the store's exact byte and artifact counts, kept by triggers on
 * cache_entries in the same transaction as every insert, delete and size change, so the cap
 * check never sums the whole table.
 */
export const storeTotals = sqliteTable('store_totals', {
  id: integer('id').primaryKey(),
  bytes: integer('bytes').notNull(),
  artifacts: integer('artifacts').notNull(),
});

/**
 * Content a job is storing, held from the moment its hash is known until the job has recorded it
 * (or given up): eviction on any node leaves it alone. A pin expires, so a dead node's pins do
 * not hold content forever.
 */
export const storePins = sqliteTable(
  'store_pins',
  {
    contentId: text('content_id').notNull(),
    holder: text('holder').notNull(),
    expiresAt: integer('expires_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.contentId, t.holder] })],
);

/**
 * Content the store removed (evicted, or found gone at start-up) and when, so that a job done
 * with it says so in its record. Cleared when the same content is stored again.
 */
export const evictedContent = sqliteTable('evicted_content', {
  contentId: text('content_id').primaryKey(),
  evictedAt: integer('evicted_at').notNull(),
});

/**
 * When each API key (jobs.api_key_id) last had a job claimed: of the keys with as few jobs
 * running, the queue takes the one whose turn is oldest (src/jobs/queue.ts, claimNextJob).
 */
export const keyClaims = sqliteTable('key_claims', {
  apiKeyId: text('api_key_id').primaryKey(),
  lastClaimedAt: integer('last_claimed_at').notNull(),
});

/** Named leases for work that one node at a time must do (eviction). */
export const serviceLeases = sqliteTable('service_leases', {
  name: text('name').primaryKey(),
  holder: text('holder').notNull(),
  expiresAt: integer('expires_at').notNull(),
});

/** Secrets the service generated itself, shared by every node (API key, URL signing secret). */
export const serviceSecrets = sqliteTable('service_secrets', {
  name: text('name').primaryKey(),
  value: text('value').notNull(),
  createdAt: integer('created_at').notNull(),
});

/**
 * A job's callback (webhook): written with the job, in the same transaction, and due from the
 * moment the job's status is final, so no way a job can end misses it (src/webhooks). Claimed
 * with a lease like a job; the id is the idempotency id the receiver sees on every attempt.
 */
export const callbackDeliveries = sqliteTable(
  'callback_deliveries',
  {
    id: text('id').primaryKey(),
    jobId: text('job_id').notNull(),
    url: text('url').notNull(),
    status: text('status', { enum: CALLBACK_STATUSES }).notNull(),
    createdAt: integer('created_at').notNull(),
    /** No attempt before this time (the backoff); the job's end makes it due at once. */
    nextAttemptAt: integer('next_attempt_at').notNull(),
    attemptCount: integer('attempt_count').notNull().default(0),
    /** JSON: the latest attempts, oldest first, at most ATTEMPT_LOG_SIZE of them (src/webhooks/deliveries.ts). */
    attemptLog: text('attempt_log').notNull(),
    /** The node making an attempt, while it makes it. */
    lockOwner: text('lock_owner'),
    leaseExpiresAt: integer('lease_expires_at'),
    /** When it was delivered or given up. */
    finishedAt: integer('finished_at'),
  },
  (t) => [
    uniqueIndex('callback_deliveries_job_idx').on(t.jobId),
    index('callback_deliveries_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`status = 'pending'`),
  ],
);
