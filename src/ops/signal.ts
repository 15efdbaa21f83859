/**
 * A named happening that one part of the service announces and others act on (a job ending, the
 * sandbox settling, content evicted). The composition root (src/main.ts) creates the signals
 * first and lets parts built later listen, so that no part needs another that is built after it.
 */
export interface Signal<T = void> {
  emit(value: T): void;
  on(listener: (value: T) => void): void;
}

export function createSignal<T = void>(): Signal<T> {
  const listeners: Array<(value: T) => void> = [];
  return {
    emit: (value) => {
      for (const listener of listeners) listener(value);
    },
    on: (listener) => void listeners.push(listener),
  };
}
