CREATE TABLE `aliases` (
	`kind` text NOT NULL,
	`key` text NOT NULL,
	`content_id` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`kind`, `key`)
);
--> statement-breakpoint
CREATE INDEX `aliases_content_idx` ON `aliases` (`content_id`);--> statement-breakpoint
CREATE TABLE `cache_entries` (
	`content_id` text NOT NULL,
	`name` text NOT NULL,
	`kind` text NOT NULL,
	`bytes` integer NOT NULL,
	`content_type` text NOT NULL,
	`sample_rate` integer,
	`channels` integer,
	`duration_s` real,
	`created_at` integer NOT NULL,
	`last_used_at` integer NOT NULL,
	PRIMARY KEY(`content_id`, `name`)
);
--> statement-breakpoint
CREATE INDEX `cache_entries_last_used_idx` ON `cache_entries` (`last_used_at`);--> statement-breakpoint
CREATE TABLE `jobs` (
	`id` text PRIMARY KEY NOT NULL,
	`url` text NOT NULL,
	`url_key` text NOT NULL,
	`status` text NOT NULL,
	`born_done` integer DEFAULT false NOT NULL,
	`follows_job_id` text,
	`created_at` integer NOT NULL,
	`started_at` integer,
	`finished_at` integer,
	`attempts` integer DEFAULT 0 NOT NULL,
	`lock_owner` text,
	`locked_at` integer,
	`progress_bytes` integer,
	`progress_total_bytes` integer,
	`content_id` text,
	`error_code` text,
	`error_message` text,
	`extractor` text,
	`media_id` text
);
--> statement-breakpoint
CREATE INDEX `jobs_claim_idx` ON `jobs` (`status`,`created_at`);--> statement-breakpoint
CREATE INDEX `jobs_url_key_idx` ON `jobs` (`url_key`,`status`);--> statement-breakpoint
CREATE INDEX `jobs_follows_idx` ON `jobs` (`follows_job_id`);