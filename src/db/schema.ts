import { index, integer, primaryKey, real, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/** Times are milliseconds since the epoch (integers), rendered as ISO strings at the edge. */

export const JOB_STATUSES = ['queued', 'running', 'done', 'failed', 'canceled'] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

export const jobs = sqliteTable(
  'jobs',
  {
    id: text('id').primaryKey(),
    url: text('url').notNull(),
    /** The URL normalized as an alias key (src/policy/source-url.ts). */
    urlKey: text('url_key').notNull(),
    status: text('status', { enum: JOB_STATUSES }).notNull(),
    bornDone: integer('born_done', { mode: 'boolean' }).notNull().default(false),
    /** Set while another job for the same URL is queued or running: this one waits for its result. */
    followsJobId: text('follows_job_id'),
    createdAt: integer('created_at').notNull(),
    startedAt: integer('started_at'),
    finishedAt: integer('finished_at'),
    attempts: integer('attempts').notNull().default(0),
    lockOwner: text('lock_owner'),
    lockedAt: integer('locked_at'),
    progressBytes: integer('progress_bytes'),
    progressTotalBytes: integer('progress_total_bytes'),
    contentId: text('content_id'),
    errorCode: text('error_code'),
    errorMessage: text('error_message'),
    extractor: text('extractor'),
    mediaId: text('media_id'),
    /** X-Request-Id of the submission, so the worker's log lines can be tied to it. */
    requestId: text('request_id'),
  },
  (t) => [
    index('jobs_claim_idx').on(t.status, t.createdAt),
    index('jobs_url_key_idx').on(t.urlKey, t.status),
    index('jobs_follows_idx').on(t.followsJobId),
  ],
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
    createdAt: integer('created_at').notNull(),
    lastUsedAt: integer('last_used_at').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.contentId, t.name] }),
    // Eviction's exact order and keyset cursor: SQLite walks it and stops at the batch's LIMIT.
    index('cache_entries_lru_idx').on(t.lastUsedAt, t.contentId, t.name),
  ],
);

/**
 * Aliases to content: kind 'url' keys a normalized submitted URL; kind 'media' keys the
 * downloader's extractor and media id ('<extractor_key>:<id>'), so that another URL of the same
 * media is recognised before anything is downloaded.
 */
export const ALIAS_KINDS = ['url', 'media'] as const;
export type AliasKind = (typeof ALIAS_KINDS)[number];

export const aliases = sqliteTable(
  'aliases',
  {
    kind: text('kind', { enum: ALIAS_KINDS }).notNull(),
    key: text('key').notNull(),
    contentId: text('content_id').notNull(),
    createdAt: integer('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.kind, t.key] }), index('aliases_content_idx').on(t.contentId)],
);

export type JobRow = typeof jobs.$inferSelect;
export type CacheEntryRow = typeof cacheEntries.$inferSelect;

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
