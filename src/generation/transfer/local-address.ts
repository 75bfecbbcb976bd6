/**
 * The address rule (http/address-policy.ts) as an upload's URL fetch applies it, in the upload node's words:
 * a URL or a redirect to a local address is refused unless the node allows local addresses, and a redirect
 * from https to plain http always. No Node-RED inside.
 */
import type { LookupAddress, LookupOptions } from 'node:dns';
import {
  addressRefusal,
  guardedLookup as policyLookup,
  isLocalAddress,
  resolvesLocal,
} from '../../http/address-policy';
import { ServiceError, invalidInput } from '../../http/errors';

export { isLocalAddress };

/** The host of an address, for sentences: never its path or query (either may hold a signature). */
export function hostOf(url: URL): string {
  return url.host;
}

/** The sentence for a local address the node's setting does not allow. */
function localRefused(where: string, address: string): ServiceError {
  return invalidInput(
    `${where} ${address}, a local address (this machine, a private network or link-local): the upload node fetches from such addresses only with "Local addresses" allowed in its settings`,
  );
}

/**
 * Refuses, before anything is sent to it, an address the fetch may not go to: a redirect from https to
 * http, and (unless allowed) an IP address that is local. A host name is checked once it is resolved, by
 * `guardedLookup`.
 */
export function checkAddress(
  url: URL,
  from: URL | undefined,
  allowLocal: boolean,
  isLocal: (address: string) => boolean,
): void {
  const refusal = addressRefusal(url, from, { allowLocal, isLocal });
  if (refusal === 'downgrade' && from) {
    throw invalidInput(
      `${hostOf(from)} redirected the file from https to plain http (${hostOf(url)}), which is refused: give an address that stays on https`,
    );
  }
  if (refusal === 'local') {
    throw localRefused(
      from ? `${hostOf(from)} redirected the file to` : 'The URL in msg.payload points to',
      hostOf(url),
    );
  }
}

/**
 * For a fetch that goes through a proxy, which resolves the host itself: the host is resolved here too and
 * refused when any of its addresses is local (the proxy might reach it the same way). A host that cannot be
 * resolved here is left to the proxy.
 */
export async function checkResolved(url: URL, isLocal: (address: string) => boolean): Promise<void> {
  const local = await resolvesLocal(url, { isLocal });
  if (local) throw localRefused(`The URL's host ${url.hostname} resolves to`, local);
}

/**
 * A DNS lookup for the fetch's connections that refuses a host name resolving to a local address;
 * `onRefused` keeps the sentence, which undici may wrap.
 */
export function guardedLookup(
  isLocal: (address: string) => boolean,
  onRefused: (error: ServiceError) => void,
): (
  hostname: string,
  options: LookupOptions,
  callback: (error: Error | null, address: string | LookupAddress[], family?: number) => void,
) => void {
  return policyLookup(isLocal, (hostname, address) => {
    const refusal = localRefused(`The URL's host ${hostname} resolves to`, address);
    onRefused(refusal);
    return refusal;
  });
}
