DROP INDEX `cache_entries_last_used_idx`;--> statement-breakpoint
CREATE INDEX `cache_entries_lru_idx` ON `cache_entries` (`last_used_at`,`content_id`,`name`);