-- The EBU R128 loudness of a content (integrated LUFS, loudness range LU, true peak dBTP), measured
-- by the conversion (src/tools/ebur128.ts) and kept on its audio.wav row; null for content stored
-- before it was measured, or silent.
ALTER TABLE `cache_entries` ADD `loudness_integrated_lufs` real;--> statement-breakpoint
ALTER TABLE `cache_entries` ADD `loudness_range_lu` real;--> statement-breakpoint
ALTER TABLE `cache_entries` ADD `loudness_true_peak_dbtp` real;
