/**
 * Which IP addresses count as local: this machine (loopback, the unspecified address), private networks,
 * link-local ones (the cloud metadata address 169.254.169.254 among them), carrier-grade NAT, multicast and
 * reserved ranges, in IPv4 and IPv6, and IPv4 addresses wrapped in IPv6 (mapped, NAT64, 6to4); and the checks
 * that keep an upload's URL fetch away from them, unless its node allows them: what such an address answers
 * would be uploaded to the service, where anyone with the service's access could read it. No Node-RED inside.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { ServiceError, invalidInput } from '../../http/errors';

/** IPv4 networks that are not the public internet (RFC 6890 and its successors). */
const LOCAL_IPV4: ReadonlyArray<[string, number]> = [
  ['0.0.0.0', 8], // "this network": 0.0.0.0 reaches this machine
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // protocol assignments
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
];

/** IPv6 networks that are not the public internet. */
const LOCAL_IPV6: ReadonlyArray<[string, number]> = [
  ['::', 96], // unspecified, loopback and the old IPv4-compatible form
  ['64:ff9b:1::', 48], // NAT64 for local use
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated, still routed by some)
  ['ff00::', 8], // multicast
];

/** An IPv4 address as the two IPv6 groups that carry it (`127.0.0.1` -> `7f00:1`). */
function asIpv6Groups(ipv4: string): string {
  const [a, b, c, d] = ipv4.split('.').map(Number);
  return `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
}

const LOCAL = new BlockList();
for (const [network, prefix] of LOCAL_IPV4) {
  // Also matches the IPv4-mapped IPv6 form (::ffff:127.0.0.1).
  LOCAL.addSubnet(network, prefix, 'ipv4');
  // The same networks reached through NAT64 (64:ff9b::/96) or 6to4 (2002::/16).
  LOCAL.addSubnet(`64:ff9b::${asIpv6Groups(network)}`, 96 + prefix, 'ipv6');
  LOCAL.addSubnet(`2002:${asIpv6Groups(network)}::`, 16 + prefix, 'ipv6');
}
for (const [network, prefix] of LOCAL_IPV6) LOCAL.addSubnet(network, prefix, 'ipv6');

/** An address without the brackets a URL puts around IPv6 (`[::1]` -> `::1`). */
function bareAddress(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/** Whether `address` (an IPv4 or IPv6 address, brackets allowed) is local; a host name is not an address. */
export function isLocalAddress(address: string): boolean {
  const bare = bareAddress(address);
  const family = isIP(bare);
  if (family === 0) return false;
  return LOCAL.check(bare, family === 6 ? 'ipv6' : 'ipv4');
}

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
  if (from?.protocol === 'https:' && url.protocol === 'http:') {
    throw invalidInput(
      `${hostOf(from)} redirected the file from https to plain http (${hostOf(url)}), which is refused: give an address that stays on https`,
    );
  }
  const address = bareAddress(url.hostname);
  if (!allowLocal && isIP(address) !== 0 && isLocal(address)) {
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
  const host = bareAddress(url.hostname);
  if (isIP(host) !== 0) return;
  const addresses = await dnsLookupAll(host).catch(() => []);
  const local = addresses.find((entry) => isLocal(entry.address));
  if (local) throw localRefused(`The URL's host ${url.hostname} resolves to`, local.address);
}

function dnsLookupAll(hostname: string): Promise<LookupAddress[]> {
  return new Promise((resolve, reject) =>
    dnsLookup(hostname, { all: true }, (error, addresses) => (error ? reject(error) : resolve(addresses))),
  );
}

/**
 * A DNS lookup for the fetch's connections (undici's `connect.lookup`, which net and tls call) that refuses
 * a host name resolving to a local address; `onRefused` keeps the sentence, which undici may wrap.
 */
export function guardedLookup(
  isLocal: (address: string) => boolean,
  onRefused: (error: ServiceError) => void,
) {
  return (
    hostname: string,
    options: LookupOptions,
    callback: (error: Error | null, address: string | LookupAddress[], family?: number) => void,
  ): void => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      const local = addresses.find((entry) => isLocal(entry.address));
      if (local) {
        const refusal = localRefused(`The URL's host ${hostname} resolves to`, local.address);
        onRefused(refusal);
        return callback(refusal, []);
      }
      if (options.all) return callback(null, addresses);
      callback(null, addresses[0].address, addresses[0].family);
    });
  };
}
