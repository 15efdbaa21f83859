import { frozen } from './read-cache.js';

/**
 * Calls made together where each is a round trip to PostgreSQL: at most `concurrency` run at
 * once; the items asked for meanwhile wait and go together (up to `maxItems` of them) as one call
 * of `runMany` when one of those ends. Idle, an item goes at once; under load, one round trip
 * (and one commit, for a write) serves many. An item is never served by a call sent before it was
 * asked for, so a read sees every write committed before it was asked for, as its own query would.
 * `runMany` answers one result per item, in order (a promise, for a result of its own to wait for
 * or fail); if it throws, each of its items fails with it.
 */
export function gathered<I, R>(
  runMany: (items: I[]) => Promise<Array<R | PromiseLike<R>>>,
  options: { concurrency: number; maxItems: number },
): (item: I) => Promise<R> {
  type Asker = { item: I; resolve: (result: R | PromiseLike<R>) => void; reject: (err: unknown) => void };
  let waiting: Asker[] = [];
  let running = 0;
  const send = () => {
    const batch = waiting.slice(0, options.maxItems);
    waiting = waiting.slice(batch.length);
    running++;
    runMany(batch.map((asker) => asker.item))
      .then(
        (results) => batch.forEach((asker, i) => asker.resolve(results[i]!)),
        (err: unknown) => batch.forEach((asker) => asker.reject(err)),
      )
      .finally(() => {
        running--;
        sendWhileRoom();
      });
  };
  const sendWhileRoom = () => {
    while (waiting.length > 0 && running < options.concurrency) send();
  };
  return (item) =>
    new Promise<R>((resolve, reject) => {
      waiting.push({ item, resolve, reject });
      sendWhileRoom();
    });
}

/**
 * Reads by key, gathered: a key asked for more than once by one wait is read once and its askers
 * share the value, frozen (undefined: not found). Nothing is kept, so no node's answer is older
 * than the request: a job polled on PostgreSQL, where other nodes write unseen.
 */
export function gatheredReads<T extends object>(
  readMany: (keys: string[]) => Promise<Map<string, T>>,
  options: { concurrency: number; maxKeys: number },
): (key: string) => Promise<T | undefined> {
  return gathered(
    async (keys: string[]) => {
      const asked = new Map<string, number>();
      for (const key of keys) asked.set(key, (asked.get(key) ?? 0) + 1);
      const values = await readMany([...asked.keys()]);
      for (const [key, value] of values) if (asked.get(key)! > 1) frozen(value);
      return keys.map((key) => values.get(key));
    },
    { concurrency: options.concurrency, maxItems: options.maxKeys },
  );
}
