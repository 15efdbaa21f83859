-- A collection submitted with playlist.item_callbacks: each child it links gets a callback delivery of its
-- own, to the collection's callback_url (src/jobs/collection/parent.ts, recordItem).
ALTER TABLE `jobs` ADD `item_callbacks` integer DEFAULT false NOT NULL;
