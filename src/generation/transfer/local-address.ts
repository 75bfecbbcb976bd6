/**
 * Which IP addresses count as local: this machine (loopback, the unspecified address), private networks,
 * link-local ones (the cloud metadata address 169.254.169.254 among them), carrier-grade NAT, multicast and
 * reserved ranges, in IPv4 and IPv6, and IPv4 addresses wrapped in IPv6 (mapped, NAT64, 6to4). An upload
 * from a URL reaches them only when its node allows it: what such an address answers would be uploaded to the
 * service, where anyone with the service's access could read it. No Node-RED inside.
 */
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
