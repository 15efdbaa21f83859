CREATE TABLE `store_totals` (
	`id` integer PRIMARY KEY NOT NULL,
	`bytes` integer NOT NULL,
	`artifacts` integer NOT NULL
);
--> statement-breakpoint
INSERT INTO `store_totals` (`id`, `bytes`, `artifacts`)
  SELECT 1, coalesce(sum(`bytes`), 0), count(*) FROM `cache_entries`;
--> statement-breakpoint
CREATE TRIGGER `cache_entries_totals_insert` AFTER INSERT ON `cache_entries` BEGIN
  UPDATE `store_totals` SET `bytes` = `bytes` + NEW.`bytes`, `artifacts` = `artifacts` + 1 WHERE `id` = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `cache_entries_totals_delete` AFTER DELETE ON `cache_entries` BEGIN
  UPDATE `store_totals` SET `bytes` = `bytes` - OLD.`bytes`, `artifacts` = `artifacts` - 1 WHERE `id` = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `cache_entries_totals_update` AFTER UPDATE OF `bytes` ON `cache_entries` BEGIN
  UPDATE `store_totals` SET `bytes` = `bytes` - OLD.`bytes` + NEW.`bytes` WHERE `id` = 1;
END;
