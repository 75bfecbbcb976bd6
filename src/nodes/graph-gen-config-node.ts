/**
 * The graph-gen-config node as the nodes that use it see it (graph-gen-config.ts makes it): its connection, or
 * why its settings make none, and its credentials. Its own module because the helpers every node uses
 * (node-helpers.ts) read it, and graph-gen-config.ts uses those helpers. No Node-RED runtime inside: types only.
 */
import type { Node } from 'node-red';
import type { GenerationConnection } from '../generation/connection';

export interface GraphGenCredentials {
  /** The API key, the bearer token or the named header's value, as the scheme says. */
  apiKey?: string;
  partnerKey?: string;
  /** Basic authentication's. */
  username?: string;
  password?: string;
}

export type GraphGenConfigNode = Node<GraphGenCredentials> & {
  /** Undefined when the settings make no connection (then `settingsError` says why). */
  connection?: GenerationConnection;
  settingsError?: string;
};
