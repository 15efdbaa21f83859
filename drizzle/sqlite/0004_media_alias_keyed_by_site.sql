-- Media aliases were keyed '<extractor>:<id>', which a host's owner could plant for another
-- site's media (see src/store/aliases.ts). The new keys name the site too; the old ones are
-- dropped rather than trusted. Their content stays, reachable through its URL aliases.
DELETE FROM `aliases` WHERE `kind` = 'media';
