/**
 * Which proxy, if any, an address is reached through: the one of Node-RED's `http proxy` config node, or else
 * the `http_proxy`, `https_proxy`, `all_proxy` and `no_proxy` environment variables, read as Node-RED's own http
 * request node reads them (its "strict" rule: a `no_proxy` entry matches its host exactly, `.example.com` and
 * `*.example.com` any host below it, `host:port` that port only, `*` every host). One rule for the REST
 * requests, the socket and the downloads. No Node-RED inside.
 */
import { invalidInput } from './errors';
import { textOf } from '../boundary/outside';

export interface ProxySettings {
  /** The proxy for http addresses ('' or absent: none). */
  httpProxy?: string;
  /** The proxy for https addresses ('' or absent: none). */
  httpsProxy?: string;
  /** Hosts reached directly. */
  noProxy?: ReadonlyArray<string>;
  /** The proxy's own credentials (an `http proxy` node's), sent as Proxy-Authorization. */
  username?: string;
  password?: string;
}

/** How Node-RED's settings (`proxyOptions`) say the environment is read. */
export interface EnvironmentProxyOptions {
  lowerCaseOnly?: boolean;
  favourUpperCase?: boolean;
  excludeNpm?: boolean;
}

const DEFAULT_PORTS: Record<string, number> = { 'http:': 80, 'https:': 443, 'ws:': 80, 'wss:': 443 };

/**
 * The proxy settings the environment gives, as Node-RED's http request node finds them (npm's `npm_config_*`
 * variables first, as it does); undefined when it names no proxy.
 */
export function proxyFromEnvironment(
  env: NodeJS.ProcessEnv = process.env,
  options: EnvironmentProxyOptions = {},
): ProxySettings | undefined {
  const read = (key: string): string => {
    if (options.excludeNpm && key.startsWith('npm_config_')) return '';
    const lower = env[key.toLowerCase()];
    const upper = env[key.toUpperCase()];
    if (options.lowerCaseOnly) return lower || '';
    if (options.favourUpperCase) return upper || lower || '';
    return lower || upper || '';
  };
  const forScheme = (scheme: string): string =>
    withScheme(
      read(`npm_config_${scheme}_proxy`) ||
        read(`${scheme}_proxy`) ||
        read('npm_config_proxy') ||
        read('all_proxy'),
      scheme,
    );
  const httpProxy = forScheme('http');
  const httpsProxy = forScheme('https');
  if (!httpProxy && !httpsProxy) return undefined;
  const noProxy = (read('npm_config_no_proxy') || read('no_proxy')).split(/[,\s]+/).filter(Boolean);
  return { httpProxy, httpsProxy, noProxy };
}

/** The settings of an `http proxy` node: one proxy for http and https, its list of hosts reached directly. */
export function proxyFromNode(node: {
  url?: string;
  noproxy?: ReadonlyArray<string>;
  username?: string;
  password?: string;
}): ProxySettings {
  const url = withScheme((node.url ?? '').trim(), 'http');
  return {
    httpProxy: url,
    httpsProxy: url,
    noProxy: (Array.isArray(node.noproxy) ? node.noproxy : [])
      .map((entry) => (textOf(entry) ?? '').trim())
      .filter(Boolean),
    username: node.username || undefined,
    password: node.password || undefined,
  };
}

/** A proxy written without its scheme (`proxy:3128`) is taken as `http://proxy:3128`, as Node-RED takes it. */
function withScheme(proxy: string, scheme: string): string {
  if (!proxy) return '';
  return proxy.includes('://') ? proxy : `${scheme === 'https' ? 'http' : scheme}://${proxy}`;
}

/** Refuses (invalid_input) a proxy whose address cannot be read or is not http(s), naming where it was set. */
export function checkedProxy(settings: ProxySettings | undefined): void {
  for (const address of new Set([settings?.httpProxy, settings?.httpsProxy])) {
    if (!address) continue;
    let url: URL | undefined;
    try {
      url = new URL(address);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
      throw invalidInput(
        `the proxy address ${JSON.stringify(hostPart(address))} is not an http(s) address: correct it in the http proxy node, or in http_proxy and https_proxy`,
      );
    }
  }
}

/** An address as far as its host, for sentences: a user and password written in it are left out. */
function hostPart(address: string): string {
  return address.replace(/^([a-z]+:\/\/)?[^@/]*@/i, '$1').slice(0, 100);
}

/** The proxy an address goes through, or undefined for a direct connection. Refuses a proxy address that cannot be read. */
export function proxyFor(address: URL, settings: ProxySettings | undefined): URL | undefined {
  if (!settings) return undefined;
  const secure = address.protocol === 'https:' || address.protocol === 'wss:';
  const proxy = secure ? settings.httpsProxy : settings.httpProxy;
  if (!proxy) return undefined;
  const hostname = address.host.replace(/:\d*$/, '').toLowerCase();
  const port = Number.parseInt(address.port, 10) || DEFAULT_PORTS[address.protocol] || 0;
  if (bypassed(hostname, port, settings.noProxy ?? [])) return undefined;
  return new URL(proxy);
}

/** Whether a `no_proxy` list names the host (Node-RED's strict rule, see the header). */
function bypassed(hostname: string, port: number, noProxy: ReadonlyArray<string>): boolean {
  return noProxy.some((raw) => {
    const entry = raw.trim().toLowerCase();
    if (!entry) return false;
    if (entry === '*') return true;
    const withPort = /^(.+):(\d+)$/.exec(entry);
    let host = withPort ? withPort[1] : entry;
    if (withPort && Number(withPort[2]) !== port) return false;
    if (!/^[.*]/.test(host)) return hostname === host;
    if (host.startsWith('*')) host = host.slice(1);
    return hostname.endsWith(host);
  });
}

/** The Proxy-Authorization of the settings' credentials, or of a user and password written in the proxy's address. */
export function proxyAuthorization(proxy: URL, settings: ProxySettings | undefined): string | undefined {
  const username = settings?.username ?? decodeURIComponent(proxy.username);
  const password = settings?.password ?? decodeURIComponent(proxy.password);
  if (!username && !password) return undefined;
  return `Basic ${Buffer.from(`${username}:${password}`, 'utf8').toString('base64')}`;
}

/** A proxy in sentences: scheme, host and port, never a user or password written in its address. */
export function proxyName(proxy: URL): string {
  return `the proxy ${proxy.protocol}//${proxy.host}`;
}
