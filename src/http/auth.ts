/**
 * How requests to a service prove who sends them: an API key (`X-API-Key`, a cloud service's), a bearer token,
 * a user name and password (basic), or a header of the user's naming, sent on every request and on the
 * socket's handshake alike; some servers (ComfyUI-Login) also take the token as `?token=` on the socket. A
 * `Credential` is made once per config node, refuses settings that cannot be sent, knows every form of its
 * secrets (to remove them from what is reported) and says in words which scheme a 401 or 403 refused. No
 * Node-RED inside.
 */
import { invalidInput } from './errors';
import { shownValue } from '../boundary/json-values';

export type AuthScheme = 'none' | 'apiKey' | 'bearer' | 'basic' | 'header';

export const AUTH_SCHEMES: ReadonlyArray<AuthScheme> = ['none', 'apiKey', 'bearer', 'basic', 'header'];

export interface AuthSettings {
  /** Absent: the API-key scheme (config nodes made before there was a choice). */
  scheme?: AuthScheme;
  /** The API key, the bearer token, or the named header's value. */
  secret?: string;
  /** Basic: the user name and password. */
  username?: string;
  password?: string;
  /** Header: its name. */
  headerName?: string;
  /** Bearer and header: also send the secret as `?token=` on the socket (the API-key scheme always does). */
  tokenInQuery?: boolean;
}

/**
 * Headers a credential may not be sent as: the ones HTTP, the socket's handshake or the proxy own. A header
 * of the user's naming replaces none of them.
 */
const RESERVED_HEADERS = new Set([
  'host',
  'connection',
  'content-length',
  'content-type',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'keep-alive',
  'expect',
  'proxy-authorization',
  'proxy-connection',
]);

/** RFC 9110's token: the characters a header name may have. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What no header value may hold: line breaks and other control characters (tab aside) would end the header. */
function hasControl(text: string): boolean {
  for (const char of text) {
    const code = char.charCodeAt(0);
    if ((code < 0x20 && code !== 0x09) || code === 0x7f) return true;
  }
  return false;
}

/** What a refusal names, with its verb and what to check ("the key", "them"). */
interface Refused {
  what: string;
  were: 'was' | 'were';
  check: string;
}

export class Credential {
  /** Made by `Credential.from`, which checks the settings. */
  constructor(
    readonly scheme: AuthScheme,
    private readonly sent: Readonly<Record<string, string>>,
    /** Sent as `?token=` on the socket's address; undefined: none. */
    readonly socketToken: string | undefined,
    /** Every form the secrets take on the wire, to remove from whatever is reported. */
    readonly secrets: ReadonlyArray<string>,
    private readonly refused: Refused | undefined,
  ) {}

  /** A credential from the settings; refuses (invalid_input) what cannot be sent, saying what to fix. */
  static from(settings: AuthSettings = {}): Credential {
    const scheme = settings.scheme ?? 'apiKey';
    const secret = settings.secret || undefined;
    if (secret !== undefined && hasControl(secret)) {
      throw invalidInput(
        'the secret in the config node holds a line break or another control character: enter it again without one',
      );
    }
    const token = settings.tokenInQuery === true ? secret : undefined;
    switch (scheme) {
      case 'none':
        return new Credential('none', {}, undefined, [], undefined);
      case 'apiKey':
        // No key: a self-hosted server, sent nothing (as before there was a choice).
        if (!secret) return new Credential('apiKey', {}, undefined, [], undefined);
        return new Credential('apiKey', { 'x-api-key': secret }, secret, [secret], {
          what: 'the API key',
          were: 'was',
          check: 'the key',
        });
      case 'bearer':
        if (!secret)
          throw invalidInput('the config node sends a bearer token, but none is set: enter the token');
        return new Credential('bearer', { authorization: `Bearer ${secret}` }, token, [secret], {
          what: 'the bearer token',
          were: 'was',
          check: 'the token',
        });
      case 'basic':
        return basic(settings);
      case 'header':
        return namedHeader(settings.headerName, secret, token);
      default:
        throw invalidInput(
          `the config node's authentication ${shownValue(scheme)} is not one of ${AUTH_SCHEMES.join(', ')}: choose one in the config node`,
        );
    }
  }

  /** The headers sent on every request to the service and on the socket's handshake. */
  get headers(): Record<string, string> {
    return { ...this.sent };
  }

  /** Whether anything is sent. */
  get isSet(): boolean {
    return this.refused !== undefined;
  }

  /**
   * The key of a cloud service: the API-key scheme's key. Undefined for every other scheme and for no key, which
   * is what tells a self-hosted server (behind a login or not) from the cloud.
   */
  get cloudKey(): string | undefined {
    return this.scheme === 'apiKey' ? this.sent['x-api-key'] : undefined;
  }

  /** What the service refused, in words that never hold the secret: "the bearer token"; undefined for none. */
  get name(): string | undefined {
    return this.refused?.what;
  }

  /** The sentence of a 401 or 403: which scheme was refused, or that the service asks for one. */
  refusal(service: string, action: string, status: number): string {
    if (!this.refused) {
      return `${service} asks for an API key or other credentials (HTTP ${status}) while ${action}: choose the authentication in the config node and enter them`;
    }
    const { what, were, check } = this.refused;
    return `${what} ${were} refused by ${service} (HTTP ${status}) while ${action}: check ${check} in the config node`;
  }

  /**
   * The dialogs' words for a refusal by `host`: "refused the bearer token", and what to do. `purpose` is
   * what the refusal stopped (", so its node definitions cannot be shown").
   */
  refusedBy(host: string, purpose = ''): string {
    if (!this.refused) {
      return `${host} asks for an API key${purpose}: enter one in the config node (or, for a server behind a login, choose its authentication there and enter that).`;
    }
    return `${host} refused ${this.refused.what}${purpose}: check ${this.refused.check}${purpose ? ' in the config node' : ''}.`;
  }
}

function basic(settings: AuthSettings): Credential {
  const username = settings.username ?? '';
  const password = settings.password ?? '';
  if (!username && !password) {
    throw invalidInput('the config node sends a user name and password, but neither is set: enter them');
  }
  // RFC 7617: the user name ends at the first colon, so one inside it would be read as part of the password.
  if (username.includes(':'))
    throw invalidInput(
      'the user name in the config node holds a colon: basic authentication cannot send one',
    );
  if (hasControl(username) || hasControl(password)) {
    throw invalidInput(
      'the user name or password in the config node holds a line break or another control character: enter it again without one',
    );
  }
  const encoded = Buffer.from(`${username}:${password}`, 'utf8').toString('base64');
  return new Credential('basic', { authorization: `Basic ${encoded}` }, undefined, [password, encoded], {
    what: 'the user name and password (basic authentication)',
    were: 'were',
    check: 'them',
  });
}

function namedHeader(
  rawName: string | undefined,
  secret: string | undefined,
  token: string | undefined,
): Credential {
  const name = (rawName ?? '').trim();
  if (!HEADER_NAME.test(name)) {
    throw invalidInput(
      `the header name ${JSON.stringify(name.slice(0, 100))} in the config node is not a header name: use letters, digits and - only, e.g. X-Auth-Token`,
    );
  }
  const lower = name.toLowerCase();
  if (RESERVED_HEADERS.has(lower) || lower.startsWith('sec-websocket-')) {
    throw invalidInput(
      `the header ${name} in the config node belongs to HTTP itself and cannot carry a credential: name another header`,
    );
  }
  if (!secret)
    throw invalidInput(`the config node sends the header ${name}, but its value is not set: enter it`);
  return new Credential('header', { [lower]: secret }, token, [secret], {
    what: `the ${name} header`,
    were: 'was',
    check: 'its value',
  });
}
