-- What the downloader (and, for a file found by yt-dlp's generic extraction, the file's own tags)
-- said of a job's source, as the job record's `media` in JSON (src/tools/media-metadata.ts); and
-- on a URL's alias, what the job that stored its content knew, which a job born done from that
-- alias copies (src/jobs/queue.ts, insertBornDoneJob). Null for jobs and aliases made before.
ALTER TABLE `aliases` ADD `media` text;--> statement-breakpoint
ALTER TABLE `jobs` ADD `media` text;
