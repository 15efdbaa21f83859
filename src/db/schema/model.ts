/** What both schemas (./sqlite.ts, ./postgres.ts) share: the value sets of their enum columns. */
export const JOB_STATUSES = ['queued', 'running', 'done', 'failed', 'canceled'] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

export const ALIAS_KINDS = ['url', 'media'] as const;
export type AliasKind = (typeof ALIAS_KINDS)[number];

/** A job's callback delivery: pending until the receiver answers 2xx (delivered) or retries run out (failed). */
export const CALLBACK_STATUSES = ['pending', 'delivered', 'failed'] as const;
export type CallbackStatus = (typeof CALLBACK_STATUSES)[number];
