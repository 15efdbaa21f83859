import fs from 'node:fs/promises';
import { openDatabase, type DatabaseChoice } from '../db/open.js';
import { createContentStore } from '../store/content-store.js';
import { createDatabasePins } from '../store/pins.js';
import { recoverAtStartup, type StartupDeps } from './startup.js';

/** The part of the configuration (src/config.ts) storage uses. */
export interface StorageConfig {
  dataDir: string;
  artifactRoot: string;
  workDir: string;
  database: DatabaseChoice;
}

/** The database and the content store, with what an earlier process of this node left behind recovered. */
export async function openStorage(
  config: StorageConfig,
  deps: Pick<StartupDeps, 'nodeId' | 'hostname' | 'now' | 'log' | 'isProcessAlive'> & {
    /** A new unique id, for each pin's holder. */
    newId: () => string;
    onStop: (stop: () => void | Promise<void>) => void;
  },
) {
  const { nodeId, now, log } = deps;
  await fs.mkdir(config.dataDir, { recursive: true });
  await fs.mkdir(config.artifactRoot, { recursive: true });
  const database = await openDatabase(config.database, nodeId, log);
  deps.onStop(() => database.close());
  const store = createContentStore(
    config.artifactRoot,
    createDatabasePins({ database, holder: () => `${nodeId}:${deps.newId()}`, now }),
    nodeId,
  );
  await recoverAtStartup({
    database,
    store,
    workDir: config.workDir,
    nodeId,
    hostname: deps.hostname,
    now,
    log,
    isProcessAlive: deps.isProcessAlive,
  });
  return { database, store };
}
