import type { Shutdown } from '../ops/shutdown.js';
import type { NodeRouter } from './node-router.js';
import { responseOf } from './answer.js';
import { problemAnswer } from './problem.js';
import type { HttpServerOptions } from './server.js';

/**
 * The front of node's server (src/http/server.ts): the operations straight from node's router,
 * the app everything else; once shutting down, the app answers every request, with 503
 * shutting_down and the connection closed.
 */
export function shutdownGate(deps: {
  shutdown: Pick<Shutdown, 'stopping'>;
  nodeRouter: NodeRouter;
  app: { fetch: HttpServerOptions['fetch'] };
}): Pick<HttpServerOptions, 'beforeApp' | 'fetch'> {
  const { shutdown, nodeRouter, app } = deps;
  return {
    beforeApp: (req, res, toApp) => (shutdown.stopping ? toApp() : nodeRouter(req, res, toApp)),
    fetch: (req, ...rest) =>
      shutdown.stopping
        ? responseOf(
            problemAnswer('shutting_down', 'The service is shutting down; try again shortly.', {
              headers: { connection: 'close', 'retry-after': '5' },
            }),
          )
        : app.fetch(req, ...rest),
  };
}
