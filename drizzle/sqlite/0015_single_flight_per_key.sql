-- Single flight within one API key only (src/jobs/queue.ts): a job follows only a leader of its
-- own key (jobs.api_key_id), so another key's job never waits behind a key's backlog nor ends with
-- an outcome of another key's (its storage allowance, say). One active leader per key and URL,
-- one running download per key and media. Followers queued before this keep their leaders.
DROP INDEX `jobs_one_leader_per_url`;--> statement-breakpoint
DROP INDEX `jobs_one_download_per_media`;--> statement-breakpoint
CREATE UNIQUE INDEX `jobs_one_leader_per_url` ON `jobs` (`api_key_id`,`url_key`) WHERE status in ('queued', 'running') and follows_job_id is null;--> statement-breakpoint
CREATE UNIQUE INDEX `jobs_one_download_per_media` ON `jobs` (`api_key_id`,`media_key`) WHERE status = 'running' and media_key is not null;