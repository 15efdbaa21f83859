CREATE TABLE `service_leases` (
	`name` text PRIMARY KEY NOT NULL,
	`holder` text NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `service_secrets` (
	`name` text PRIMARY KEY NOT NULL,
	`value` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `store_pins` (
	`content_id` text NOT NULL,
	`holder` text NOT NULL,
	`expires_at` integer NOT NULL,
	PRIMARY KEY(`content_id`, `holder`)
);
--> statement-breakpoint
ALTER TABLE `jobs` ADD `lease_expires_at` integer;--> statement-breakpoint
ALTER TABLE `jobs` ADD `media_key` text;--> statement-breakpoint
CREATE INDEX `jobs_lease_idx` ON `jobs` (`status`,`lease_expires_at`);--> statement-breakpoint
CREATE UNIQUE INDEX `jobs_one_leader_per_url` ON `jobs` (`url_key`) WHERE status in ('queued', 'running') and follows_job_id is null;--> statement-breakpoint
CREATE UNIQUE INDEX `jobs_one_download_per_media` ON `jobs` (`media_key`) WHERE status = 'running' and media_key is not null;