/**
 * The automation service's base address from an automation-config node's settings: a self-hosted
 * instance (protocol, host, port, optional path prefix) or a cloud instance (its address), followed by
 * `/api/v<version>`. Pure, so every spelling users type can be tested on its own.
 */
import { invalidInput } from '../http/errors';
import { textOf } from '../boundary/outside';

export type Deployment = 'self-hosted' | 'cloud';

export interface AddressSettings {
  deployment?: Deployment | string;
  protocol?: string;
  host?: string;
  port?: number | string;
  pathPrefix?: string;
  instanceUrl?: string;
  apiVersion?: number | string;
}

export const DEFAULT_API_VERSION = 1;

/** `/n8n/`, `n8n`, `/n8n`, `//n8n//` all become `/n8n`; blank becomes `` (no prefix). */
export function normalisePathPrefix(prefix: string | undefined): string {
  const segments = (prefix ?? '')
    .trim()
    .split('/')
    .filter((segment) => segment !== '');
  return segments.length === 0 ? '' : `/${segments.join('/')}`;
}

/** `1`, `"1"`, `"v1"`, `"V2"` → 1, 1, 1, 2; blank → the default. */
export function parseApiVersion(value: number | string | undefined): number {
  const given = (textOf(value, 100) ?? '').trim();
  if (given === '') return DEFAULT_API_VERSION;
  const text = given.replace(/^v/i, '');
  const version = Number(text);
  if (!/^\d+$/.test(text) || version < 1) {
    throw invalidInput(`the API version "${given}" is not a whole number such as 1`);
  }
  return version;
}

function parsePort(value: number | string | undefined): number | undefined {
  const text = (textOf(value, 100) ?? '').trim();
  if (text === '') return undefined;
  const port = Number(text);
  if (!/^\d+$/.test(text) || port < 1 || port > 65535) {
    throw invalidInput(`the port "${text}" is not a number from 1 to 65535`);
  }
  return port;
}

function selfHostedOrigin(settings: AddressSettings): string {
  const protocol = (settings.protocol ?? 'http').trim().toLowerCase().replace(/:$/, '') || 'http';
  if (protocol !== 'http' && protocol !== 'https') {
    throw invalidInput(`the protocol "${protocol}" is not http or https`);
  }
  let host = (settings.host ?? '').trim();
  // A host typed with its scheme or a trailing slash is still clearly meant as the host.
  host = host.replace(/^[a-z][a-z0-9+.-]*:\/\//i, '').replace(/\/+$/, '');
  if (host === '') throw invalidInput('the host of the automation service is not set in its config node');
  if (/[/?#@\s]/.test(host)) throw invalidInput(`the host "${host}" is not a host name or address`);
  if (host.includes(':') && !host.startsWith('[')) host = `[${host}]`;
  const port = parsePort(settings.port);
  const defaultPort = protocol === 'https' ? 443 : 80;
  const origin = `${protocol}://${host}${port !== undefined && port !== defaultPort ? `:${port}` : ''}`;
  try {
    return new URL(origin).origin;
  } catch {
    throw invalidInput(`the host "${host}" is not a host name or address`);
  }
}

function cloudRoot(instanceUrl: string | undefined): string {
  const text = (instanceUrl ?? '').trim();
  if (text === '') throw invalidInput('the instance address of the automation service is not set');
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalidInput(`the instance address "${text}" is not an http(s) address`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw invalidInput(`the instance address "${text}" is not an http(s) address`);
  }
  // Users paste the address they see, sometimes with the API part already on it: keep only the root.
  const path = normalisePathPrefix(url.pathname.replace(/\/api(\/v\d+)?\/?$/i, ''));
  return `${url.origin}${path}`;
}

/** The base address, e.g. `http://localhost:5678/n8n/api/v1` (no trailing slash). */
export function automationBaseUrl(settings: AddressSettings): string {
  const version = parseApiVersion(settings.apiVersion);
  const root =
    settings.deployment === 'cloud'
      ? cloudRoot(settings.instanceUrl)
      : `${selfHostedOrigin(settings)}${normalisePathPrefix(settings.pathPrefix)}`;
  return `${root}/api/v${version}`;
}
