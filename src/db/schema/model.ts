/** What both schemas (./sqlite.ts, ./postgres.ts) share: the value sets of their enum columns. */
/**
 * 'listed' is a collection's only (src/jobs/collection/parent.ts): its listing has ended and it
 * waits for its children; no node holds it. A collection that is 'running' is being listed.
 */
export const JOB_STATUSES = ['queued', 'running', 'listed', 'done', 'failed', 'canceled'] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

export const ALIAS_KINDS = ['url', 'media'] as const;
export type AliasKind = (typeof ALIAS_KINDS)[number];

/** A job's callback delivery: pending until the receiver answers 2xx (delivered) or retries run out (failed). */
export const CALLBACK_STATUSES = ['pending', 'delivered', 'failed'] as const;
export type CallbackStatus = (typeof CALLBACK_STATUSES)[number];

/** What a job is: one source to fetch, or a collection (playlist, album, feed) whose entries become child jobs. */
export const JOB_KINDS = ['source', 'collection'] as const;
export type JobKind = (typeof JOB_KINDS)[number];
