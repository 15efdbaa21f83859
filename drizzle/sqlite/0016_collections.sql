-- Collections (issue 47, src/jobs/collection/parent.ts): a job of kind 'collection' lists a playlist,
-- album or feed; each entry becomes an item, and an entry that passes the submission policy a child
-- job (parent_id). The collection's counts of children, and its end once its listing has ended
-- ('listed') and every child has ended, are written by a trigger in the very transaction that
-- links or ends a child, on whichever node: no end can be missed and none counted twice.
CREATE TABLE `collection_items` (
	`parent_id` text NOT NULL,
	`idx` integer NOT NULL,
	`url` text NOT NULL,
	`title` text,
	`job_id` text,
	`problem` text,
	PRIMARY KEY(`parent_id`, `idx`)
);
--> statement-breakpoint
ALTER TABLE `jobs` ADD `kind` text DEFAULT 'source' NOT NULL;--> statement-breakpoint
ALTER TABLE `jobs` ADD `parent_id` text;--> statement-breakpoint
ALTER TABLE `jobs` ADD `max_items` integer;--> statement-breakpoint
ALTER TABLE `jobs` ADD `collection_title` text;--> statement-breakpoint
ALTER TABLE `jobs` ADD `entries_found` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `jobs` ADD `items_refused` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `jobs` ADD `children` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `jobs` ADD `children_done` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `jobs` ADD `children_failed` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `jobs` ADD `children_canceled` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `jobs` ADD `truncated` integer DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX `jobs_parent_idx` ON `jobs` (`parent_id`) WHERE parent_id is not null;;--> statement-breakpoint
CREATE TRIGGER `jobs_collection_counts` AFTER UPDATE OF `status`, `parent_id` ON `jobs`
  WHEN NEW.`parent_id` IS NOT NULL BEGIN
  UPDATE `jobs` SET
    `children` = `children` + (OLD.`parent_id` IS NULL),
    `children_done` = `children_done` + (NEW.`status` = 'done' AND (OLD.`parent_id` IS NULL OR OLD.`status` <> 'done')),
    `children_failed` = `children_failed` + (NEW.`status` = 'failed' AND (OLD.`parent_id` IS NULL OR OLD.`status` <> 'failed')),
    `children_canceled` = `children_canceled` + (NEW.`status` = 'canceled' AND (OLD.`parent_id` IS NULL OR OLD.`status` <> 'canceled'))
    WHERE `id` = NEW.`parent_id`;
  UPDATE `jobs` SET `status` = 'done', `finished_at` = coalesce(NEW.`finished_at`, `finished_at`)
    WHERE `id` = NEW.`parent_id` AND `status` = 'listed'
      AND `children_done` + `children_failed` + `children_canceled` >= `children`;
END;