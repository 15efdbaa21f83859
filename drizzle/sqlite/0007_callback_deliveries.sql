CREATE TABLE `callback_deliveries` (
	`id` text PRIMARY KEY NOT NULL,
	`job_id` text NOT NULL,
	`url` text NOT NULL,
	`status` text NOT NULL,
	`created_at` integer NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`attempt_count` integer DEFAULT 0 NOT NULL,
	`attempt_log` text NOT NULL,
	`lock_owner` text,
	`lease_expires_at` integer,
	`finished_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `callback_deliveries_job_idx` ON `callback_deliveries` (`job_id`);--> statement-breakpoint
CREATE INDEX `callback_deliveries_due_idx` ON `callback_deliveries` (`next_attempt_at`) WHERE status = 'pending';