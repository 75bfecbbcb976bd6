/**
 * How a client reaches its service and the other hosts it is sent to: the undici pools (direct, or undici's own
 * ProxyAgent through a CONNECT tunnel), the socket's connection (an http.Agent whose connection is that same
 * tunnel, made with undici's Client#connect, then TLS over it), and the sentences for what fails on the way (a
 * certificate not trusted, a proxy that refuses). The service's TLS settings (a `tls-config` node's: certificate
 * authority, client certificate and key, whether to verify) are used for the service's own host only: another
 * host (a signed storage address, an image URL) is checked against the system's authorities and is never shown
 * the client certificate. The proxy rule (proxy.ts) is the same for every host. No Node-RED inside.
 */
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import { Agent, Client, ProxyAgent, errors as undiciErrors, type Dispatcher } from 'undici';
import { errorText, textOf } from '../boundary/outside';
import { bareAddress, guardedLookup, isLocalAddress } from './address-policy';
import { ServiceError } from './errors';
import { proxyAuthorization, proxyFor, proxyName, type ProxySettings } from './proxy';

/** The TLS options a tls-config node gives that this package passes on (ALPN is left out: both sides speak HTTP/1.1). */
const TLS_KEYS = ['ca', 'cert', 'key', 'passphrase', 'servername', 'rejectUnauthorized'] as const;

/** `tls.connect`'s options for the service's host: certificate authority, client certificate and key, verify or not. */
export type TlsSettings = Pick<tls.ConnectionOptions, (typeof TLS_KEYS)[number]>;

export interface TransportSettings {
  /** TLS options for the service's own host. */
  tls?: TlsSettings;
  /** The proxy rule; absent: every host directly. */
  proxy?: ProxySettings;
}

/** The tls-config node's options this package uses, from what its `addTLSOptions` wrote. */
export function tlsOptionsOf(options: Record<string, unknown>): TlsSettings {
  const picked: Record<string, unknown> = {};
  for (const key of TLS_KEYS)
    if (options[key] !== undefined && options[key] !== '') picked[key] = options[key];
  return picked as TlsSettings;
}

/** The secrets a transport holds: the proxy's password (and its header), the client key's passphrase. */
export function transportSecrets(settings: TransportSettings | undefined): string[] {
  const secrets: string[] = [];
  const passphrase = settings?.tls?.passphrase;
  if (typeof passphrase === 'string' && passphrase) secrets.push(passphrase);
  const proxy = settings?.proxy;
  if (proxy?.password) secrets.push(proxy.password);
  for (const address of [proxy?.httpProxy, proxy?.httpsProxy]) {
    let url: URL;
    try {
      url = new URL(address ?? '');
    } catch {
      continue;
    }
    if (url.password) secrets.push(decodeURIComponent(url.password), url.password);
    const header = proxyAuthorization(url, proxy);
    if (header) secrets.push(header.slice('Basic '.length));
  }
  return secrets;
}

/**
 * The pools one client uses: one for the service's host (`service`), one per proxy (or none) for other hosts
 * (`foreign`), all closed together. `agentOptions` are the pools' timeouts and sizes.
 */
export class Transport {
  private readonly foreignPools = new Map<string, Dispatcher>();
  private servicePool?: Dispatcher;
  private serviceHostname?: string;
  /**
   * Another host's connections resolve its name through the address rule (address-policy.ts): a name that
   * resolves to a local address is refused when connecting too (its answer may have changed since it was
   * checked), unless it is the service's own host.
   */
  private readonly foreignLookup = guardedLookup(
    isLocalAddress,
    (hostname, address) =>
      new ServiceError(
        'server_error',
        `${hostname} resolves to ${address}, a local address (this machine, a private network or link-local): a redirect there is refused`,
      ),
    (hostname) => hostname === this.serviceHostname,
  );

  constructor(
    readonly settings: TransportSettings = {},
    private readonly agentOptions: Agent.Options = {},
  ) {}

  /** The pool for the service's own host (with its TLS settings), made once. */
  service(base: URL): Dispatcher {
    this.serviceHostname ??= bareAddress(base.hostname);
    this.servicePool ??= this.pool(base, this.settings.tls);
    return this.servicePool;
  }

  /** The pool for another host: no TLS settings of the service's, the same proxy rule. */
  foreign(address: URL): Dispatcher {
    const proxy = this.proxyFor(address);
    const key = proxy?.href ?? 'direct';
    let pool = this.foreignPools.get(key);
    if (!pool) {
      pool = this.pool(address, undefined, this.foreignLookup);
      this.foreignPools.set(key, pool);
    }
    return pool;
  }

  /**
   * A proxy's pool for another host when one applies, else undefined (the caller keeps its own pool): for a
   * client that makes its own direct connections (an upload's image URL).
   */
  proxiedForeign(address: URL): Dispatcher | undefined {
    return this.proxyFor(address) ? this.foreign(address) : undefined;
  }

  /** The proxy an address goes through, if any. */
  proxyFor(address: URL): URL | undefined {
    return proxyFor(address, this.settings.proxy);
  }

  /**
   * The `ws` options that reach the service's socket as its REST requests reach the service: the TLS settings
   * for wss, and through the proxy when one applies (an agent whose connection is a CONNECT tunnel).
   */
  socketOptions(base: URL): { agent?: http.Agent } & TlsSettings {
    const secure = base.protocol === 'https:';
    const proxy = this.proxyFor(base);
    if (proxy)
      return {
        agent: new TunnelAgent(proxy, this.settings.proxy, secure ? this.settings.tls : undefined, secure),
      };
    return secure ? { ...this.settings.tls } : {};
  }

  /** Closes every pool, letting what is under way finish. */
  async close(): Promise<void> {
    await Promise.all(this.pools().map((pool) => pool.close().catch(() => undefined)));
  }

  /** Destroys every pool, cutting off what is under way. */
  async destroy(): Promise<void> {
    await Promise.all(this.pools().map((pool) => pool.destroy().catch(() => undefined)));
  }

  private pools(): Dispatcher[] {
    return [...(this.servicePool ? [this.servicePool] : []), ...this.foreignPools.values()];
  }

  private pool(
    address: URL,
    tlsOptions: TlsSettings | undefined,
    lookup?: ReturnType<typeof guardedLookup>,
  ): Dispatcher {
    const proxy = this.proxyFor(address);
    if (!proxy)
      return new Agent({ ...this.agentOptions, connect: { ...tlsOptions, ...(lookup ? { lookup } : {}) } });
    return new ProxyAgent({
      ...this.agentOptions,
      uri: proxy.href,
      token: proxyAuthorization(proxy, this.settings.proxy),
      requestTls: tlsOptions ? { ...tlsOptions } : undefined,
    });
  }
}

/** Milliseconds the socket's tunnel may take to open and to be answered. */
const TUNNEL_TIMEOUT_MS = 10_000;

/** A proxy answered the CONNECT with another status than 200. */
export class ProxyRefusal extends Error {
  readonly code = 'PROXY_REFUSED';
  constructor(
    readonly proxy: URL,
    readonly status: number,
  ) {
    super(`${proxyName(proxy)} answered the tunnel with HTTP ${status}`);
  }
}

/**
 * The socket's connection through a proxy: ws hands its request to this agent, which opens a CONNECT tunnel
 * (undici's Client#connect, as its ProxyAgent does for REST) and, for wss, TLS over it with the service's
 * settings. One connection per agent; nothing is kept alive.
 */
class TunnelAgent extends http.Agent {
  constructor(
    private readonly proxy: URL,
    private readonly proxySettings: ProxySettings | undefined,
    private readonly tlsOptions: TlsSettings | undefined,
    private readonly secure: boolean,
  ) {
    super({ keepAlive: false });
    // https.request (wss) refuses an agent that does not say it speaks https.
    (this as unknown as { protocol: string }).protocol = secure ? 'https:' : 'http:';
  }

  override createConnection(
    options: http.ClientRequestArgs,
    callback?: (error: Error | null, socket: Duplex) => void,
  ): Duplex | undefined {
    const done = callback ?? (() => undefined);
    const host = String(options.host ?? options.hostname ?? '').replace(/^\[|\]$/g, '');
    const port = Number(options.port) || (this.secure ? 443 : 80);
    const target = `${net.isIPv6(host) ? `[${host}]` : host}:${port}`;
    const client = new Client(this.proxy.origin, {
      connectTimeout: TUNNEL_TIMEOUT_MS,
      headersTimeout: TUNNEL_TIMEOUT_MS,
    });
    const authorization = proxyAuthorization(this.proxy, this.proxySettings);
    client
      .connect({
        path: target,
        headers: { host: target, ...(authorization ? { 'proxy-authorization': authorization } : {}) },
      })
      .then(
        ({ statusCode, socket }) => {
          void client.close().catch(() => undefined);
          if (statusCode !== 200) {
            socket.destroy();
            done(new ProxyRefusal(this.proxy, statusCode), undefined as unknown as Duplex);
            return;
          }
          if (!this.secure) {
            done(null, socket);
            return;
          }
          const secured = tls.connect({
            ...this.tlsOptions,
            socket: socket as net.Socket,
            servername: this.tlsOptions?.servername ?? (net.isIP(host) ? undefined : host),
          });
          done(null, secured);
        },
        (error: unknown) => {
          void client.destroy().catch(() => undefined);
          done(error instanceof Error ? error : new Error(errorText(error)), undefined as unknown as Duplex);
        },
      );
    return undefined;
  }
}

/** Certificate checks that failed: the server's certificate is not trusted, or names another host. */
const CERTIFICATE_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'CERT_REJECTED',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** The errors a request's failure wraps (undici's cause, a SecureProxyConnectionError's cause), outermost first. */
function chain(error: unknown): unknown[] {
  const found: unknown[] = [];
  let current = error;
  while (current !== undefined && current !== null && found.length < 5 && !found.includes(current)) {
    found.push(current);
    current = (current as { cause?: unknown }).cause;
  }
  return found;
}

/**
 * What went wrong on the way to a host, when it is the TLS check or a proxy: a sentence that says what to fix,
 * and whether trying again could help (it cannot for a certificate that is not trusted or a proxy that refuses
 * the host). Undefined for every other failure.
 */
export function transportFailure(
  error: unknown,
  host: string,
  proxy: URL | undefined,
): { sentence: string; permanent: boolean } | undefined {
  for (const link of chain(error)) {
    const code = (link as { code?: unknown } | null)?.code;
    if (link instanceof ProxyRefusal) return proxyRefused(link.proxy, link.status, host);
    const tunnel =
      link instanceof undiciErrors.RequestAbortedError ? /Proxy response \((\d+)\)/.exec(link.message) : null;
    if (tunnel && proxy) return proxyRefused(proxy, Number(tunnel[1]), host);
    if (typeof code !== 'string') continue;
    if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
      return {
        sentence: `the certificate of ${host} does not name ${host} (${code}): use the name its certificate names in the base address, or set the server name in the TLS configuration`,
        permanent: true,
      };
    }
    if (CERTIFICATE_CODES.has(code)) {
      return {
        sentence: `the certificate of ${host} is not trusted (${code}): if it comes from a private certificate authority, add that authority's certificate (CA) in a TLS configuration on the config node`,
        permanent: true,
      };
    }
    if (code.startsWith('ERR_SSL_') || code === 'EPROTO') {
      return {
        sentence: `${host} did not accept the TLS connection (${code}): check that the base address's scheme fits the server, and if it asks for a client certificate, set one in a TLS configuration on the config node`,
        permanent: true,
      };
    }
  }
  if (proxy) {
    const code = chain(error)
      .map((link) => (link as { code?: unknown } | null)?.code)
      .find((value) => typeof value === 'string');
    return {
      sentence: `${host} could not be reached through ${proxyName(proxy)}${code ? ` (${textOf(code, 100)})` : ''}: check the proxy (the config node's http proxy, or http_proxy and no_proxy) and that it reaches the service`,
      permanent: false,
    };
  }
  return undefined;
}

function proxyRefused(proxy: URL, status: number, host: string): { sentence: string; permanent: boolean } {
  const fix =
    status === 407
      ? 'it asks for its own user name and password: set them in the http proxy node'
      : `check that ${proxyName(proxy)} lets Node-RED reach ${host}, or add ${host} to its no proxy list`;
  return {
    sentence: `${proxyName(proxy)} refused to connect to ${host} (HTTP ${status}): ${fix}`,
    // A proxy that is down or overloaded may answer 502 to 504 for a while.
    permanent: status < 500,
  };
}
