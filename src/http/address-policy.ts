/**
 * The one rule for addresses that someone else chose: the URL in an upload's msg.payload, and every redirect a
 * client follows (an upload's image host's, the service's redirect of a download to its storage). What such an
 * address answers becomes a msg's payload, a saved file or an upload the service keeps, so it may not reach
 * this machine or its networks: loopback, the unspecified address, private networks, link-local ones (the
 * cloud metadata address 169.254.169.254 among them), carrier-grade NAT, multicast and reserved ranges, in
 * IPv4 and IPv6, and IPv4 addresses wrapped in IPv6 (mapped, NAT64, 6to4). A redirect from https to plain http
 * is refused too. Not refused: the service's own origin (self-hosted servers are often on 127.0.0.1), and
 * origins trusted by name (`trustOrigin`, or the GRAPH_GEN_TRUSTED_ORIGINS environment variable, comma
 * separated: a storage host on one's own network). A host name is checked once it is resolved
 * (`guardedLookup`, `resolvesLocal`). The sentences are the callers'. No Node-RED inside.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { BlockList, isIP } from 'node:net';

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
export function bareAddress(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/** Whether `address` (an IPv4 or IPv6 address, brackets allowed) is local; a host name is not an address. */
export function isLocalAddress(address: string): boolean {
  const bare = bareAddress(address);
  const family = isIP(bare);
  if (family === 0) return false;
  return LOCAL.check(bare, family === 6 ? 'ipv6' : 'ipv4');
}

/** Origins trusted in this process (the sandbox's storage host); each `trustOrigin` gives its own removal. */
const trusted = new Map<string, number>();

/**
 * Trusts an origin (`http://127.0.0.1:8189`) as the service's own: a redirect to it is followed though its
 * address is local. Returns what takes the trust back.
 */
export function trustOrigin(origin: string): () => void {
  const key = new URL(origin).origin;
  trusted.set(key, (trusted.get(key) ?? 0) + 1);
  let taken = false;
  return () => {
    if (taken) return;
    taken = true;
    const count = (trusted.get(key) ?? 1) - 1;
    if (count > 0) trusted.set(key, count);
    else trusted.delete(key);
  };
}

/** The origins trusted by the environment, read each time (as the proxy variables are). */
function environmentOrigins(env: NodeJS.ProcessEnv = process.env): string[] {
  const origins: string[] = [];
  for (const entry of (env.GRAPH_GEN_TRUSTED_ORIGINS ?? '').split(',')) {
    if (!entry.trim()) continue;
    try {
      origins.push(new URL(entry.trim()).origin);
    } catch {
      // not an address: trusts nothing
    }
  }
  return origins;
}

function isTrusted(url: URL): boolean {
  return trusted.has(url.origin) || environmentOrigins().includes(url.origin);
}

/** Whether a host name (not an address) is a trusted origin's, for a lookup that sees the name alone. */
function isTrustedHostname(hostname: string): boolean {
  const named = (origin: string) => new URL(origin).hostname === hostname;
  return [...trusted.keys()].some(named) || environmentOrigins().some(named);
}

export interface AddressRules {
  /** Local addresses allowed anyway (an upload node's "Local addresses" setting). */
  allowLocal?: boolean;
  /** Which addresses count as local (default: `isLocalAddress`); tests, which stand in for the internet on 127.0.0.1, narrow it. */
  isLocal?: (address: string) => boolean;
  /** The service's own origin (its base address): never refused. */
  ownOrigin?: string;
}

/** Why an address may not be fetched. */
export type AddressRefusal = 'scheme' | 'downgrade' | 'local';

/**
 * Why `url`, reached from `from` (a redirect's source) or first, may not be fetched; undefined when it may. A
 * host name passes here and is checked once resolved (`guardedLookup`, `resolvesLocal`).
 */
export function addressRefusal(
  url: URL,
  from: URL | undefined,
  rules: AddressRules = {},
): AddressRefusal | undefined {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'scheme';
  if (from?.protocol === 'https:' && url.protocol === 'http:') return 'downgrade';
  if (rules.allowLocal || url.origin === rules.ownOrigin || isTrusted(url)) return undefined;
  const address = bareAddress(url.hostname);
  return isIP(address) !== 0 && (rules.isLocal ?? isLocalAddress)(address) ? 'local' : undefined;
}

/**
 * The first local address a host name resolves to, for a fetch that goes through a proxy (which resolves the
 * host itself, past `guardedLookup`) or as a check before connecting; undefined for an address, a trusted or
 * allowed host, or a name that cannot be resolved here (left to whoever connects).
 */
export async function resolvesLocal(url: URL, rules: AddressRules = {}): Promise<string | undefined> {
  const host = bareAddress(url.hostname);
  if (isIP(host) !== 0 || rules.allowLocal || url.origin === rules.ownOrigin || isTrusted(url))
    return undefined;
  const addresses = await new Promise<LookupAddress[]>((resolve) =>
    dnsLookup(host, { all: true }, (error, found) => resolve(error ? [] : found)),
  );
  return addresses.find((entry) => (rules.isLocal ?? isLocalAddress)(entry.address))?.address;
}

/**
 * A DNS lookup for a pool's connections (undici's `connect.lookup`, which net and tls call) that refuses a host
 * name resolving to a local address, unless the name is a trusted origin's or `exempt` (the service's own);
 * `refusal` makes the error (and may keep it: undici may wrap it).
 */
export function guardedLookup(
  isLocal: (address: string) => boolean,
  refusal: (hostname: string, address: string) => Error,
  exempt: (hostname: string) => boolean = () => false,
) {
  return (
    hostname: string,
    options: LookupOptions,
    callback: (error: Error | null, address: string | LookupAddress[], family?: number) => void,
  ): void => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      const local =
        exempt(hostname) || isTrustedHostname(hostname)
          ? undefined
          : addresses.find((entry) => isLocal(entry.address));
      if (local) return callback(refusal(hostname, local.address), []);
      if (options.all) return callback(null, addresses);
      callback(null, addresses[0].address, addresses[0].family);
    });
  };
}
