/**
 * Preloaded into the service by fault tests that must stop a content-store put at one exact point
 * (NODE_OPTIONS="--import <this file>", SF_HOLD_STAGED_PUT=<marker file>): the first rename out of
 * <artifact root>/.incoming, the one that moves a staged, synced file onto its content address,
 * never happens. Instead the hook writes {"staged", "target"} into the marker file and leaves the
 * put waiting for good, so the test sees the staged file in place and kills the service there.
 * Every other rename goes through. Without SF_HOLD_STAGED_PUT it does nothing.
 */
import { writeFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

const marker = process.env.SF_HOLD_STAGED_PUT;
if (marker) {
  const rename = fs.rename;
  let held = false;
  fs.rename = (from, to) => {
    if (held || path.basename(path.dirname(String(from))) !== '.incoming') return rename(from, to);
    held = true;
    writeFileSync(marker, JSON.stringify({ staged: String(from), target: String(to) }));
    return new Promise(() => {});
  };
}
