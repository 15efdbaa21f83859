CREATE TABLE "aliases" (
	"kind" text NOT NULL,
	"key" text NOT NULL,
	"content_id" text NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "aliases_kind_key_pk" PRIMARY KEY("kind","key")
);
--> statement-breakpoint
CREATE TABLE "cache_entries" (
	"content_id" text NOT NULL,
	"name" text NOT NULL,
	"kind" text NOT NULL,
	"bytes" bigint NOT NULL,
	"content_type" text NOT NULL,
	"sample_rate" integer,
	"channels" integer,
	"duration_s" double precision,
	"created_at" bigint NOT NULL,
	"last_used_at" bigint NOT NULL,
	CONSTRAINT "cache_entries_content_id_name_pk" PRIMARY KEY("content_id","name")
);
--> statement-breakpoint
CREATE TABLE "jobs" (
	"id" text PRIMARY KEY NOT NULL,
	"url" text NOT NULL,
	"url_key" text NOT NULL,
	"status" text NOT NULL,
	"born_done" boolean DEFAULT false NOT NULL,
	"follows_job_id" text,
	"created_at" bigint NOT NULL,
	"started_at" bigint,
	"finished_at" bigint,
	"attempts" integer DEFAULT 0 NOT NULL,
	"lock_owner" text,
	"lease_expires_at" bigint,
	"progress_bytes" bigint,
	"progress_total_bytes" bigint,
	"content_id" text,
	"error_code" text,
	"error_message" text,
	"extractor" text,
	"media_id" text,
	"media_key" text,
	"request_id" text
);
--> statement-breakpoint
CREATE TABLE "service_leases" (
	"name" text PRIMARY KEY NOT NULL,
	"holder" text NOT NULL,
	"expires_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "service_secrets" (
	"name" text PRIMARY KEY NOT NULL,
	"value" text NOT NULL,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "store_pins" (
	"content_id" text NOT NULL,
	"holder" text NOT NULL,
	"expires_at" bigint NOT NULL,
	CONSTRAINT "store_pins_content_id_holder_pk" PRIMARY KEY("content_id","holder")
);
--> statement-breakpoint
CREATE TABLE "store_totals" (
	"id" integer PRIMARY KEY NOT NULL,
	"bytes" bigint NOT NULL,
	"artifacts" bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX "aliases_content_idx" ON "aliases" USING btree ("content_id");--> statement-breakpoint
CREATE INDEX "cache_entries_lru_idx" ON "cache_entries" USING btree ("last_used_at","content_id","name");--> statement-breakpoint
CREATE INDEX "jobs_claim_idx" ON "jobs" USING btree ("status","created_at");--> statement-breakpoint
CREATE INDEX "jobs_lease_idx" ON "jobs" USING btree ("status","lease_expires_at");--> statement-breakpoint
CREATE INDEX "jobs_url_key_idx" ON "jobs" USING btree ("url_key","status");--> statement-breakpoint
CREATE INDEX "jobs_follows_idx" ON "jobs" USING btree ("follows_job_id");--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_one_leader_per_url" ON "jobs" USING btree ("url_key") WHERE status in ('queued', 'running') and follows_job_id is null;--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_one_download_per_media" ON "jobs" USING btree ("media_key") WHERE status = 'running' and media_key is not null;