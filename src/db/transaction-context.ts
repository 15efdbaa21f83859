import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Which transaction the running code is inside, for the databases' transaction() to join an open
 * one and (SQLite) to let its own queries through the gate. An enabled AsyncLocalStorage makes
 * node run a hook for every promise the process creates (Node 20 and 22), all requests alike:
 * 5-12% of a request's CPU in profiles. So it is enabled only while a transaction is open or
 * waiting to open, and disabled when the last one ends.
 */
export interface TransactionContext<T> {
  /** The transaction the caller runs inside, if any. */
  current(): T | undefined;
  /** Runs `fn` inside `store`. */
  run<R>(store: T, fn: () => Promise<R>): Promise<R>;
}

export function createTransactionContext<T>(): TransactionContext<T> {
  const storage = new AsyncLocalStorage<T>();
  let open = 0;
  return {
    current: () => (open === 0 ? undefined : storage.getStore()),
    async run(store, fn) {
      open++;
      try {
        return await storage.run(store, fn);
      } finally {
        // Once no transaction is open, work a transaction left running reads none (never one
        // that has already ended).
        if (--open === 0) storage.disable();
      }
    },
  };
}
