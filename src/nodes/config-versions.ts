/**
 * config-versions: every node type's settings version, and one migration per version, in order. Settings were
 * added in every release; a flow saved by an earlier release lacks the later ones. The rule for reading such
 * a flow lives here and only here: each node's constructor calls `migrateConfig` once and reads the settings
 * it gets back, each of them present (one the node was saved without is the value it was read with before
 * the setting existed: its old default). The editor saves the current version as the hidden `configVersion`.
 *
 * A node without `configVersion` (every node saved before it existed, whatever its release, and flows written
 * by hand) is version 0, and every migration runs on it. Each migration so far only adds settings, and fills
 * one only where the node lacks it, so a node a later release saved before versions existed keeps what it
 * has. A migration that renames a setting or changes what one means would come as a new version with a step
 * of its own beside `added`. A node of a newer version than this code knows is left as it is, and said once.
 */

/** A setting's value as the editor saves it. */
type SettingValue = string | number | boolean | Readonly<Record<string, never>>;

/** One version of a node type's settings. */
interface ConfigVersion {
  /** The release whose editor first saved them (issues resolved in it). */
  readonly release: string;
  /** The settings it added, each with the value a node saved without it was read with (its old default). */
  readonly added: Readonly<Record<string, SettingValue>>;
}

// The releases, by the issues each resolved (a release's settings may come from several of its issues).
const FIRST = 'issues 2-5 (the first release)';
const LIMITS = 'issues 8-9 (limits)';
const INPUTS = 'issues 11-12 (inputs, seeds, files from)';
const ACCESS = 'issues 20-22 (access, URL and buffer limits, resume, pictures, saved workflows, job events)';
const DIALECT = 'issue 28 (Comfy API v2)';
const POOL = 'issue 29 (server pool)';

/**
 * Each node type's versions, oldest first: version n is `VERSIONS[type][n - 1]`, and its migration fills what
 * it added. Version 1 holds the first release's settings that a node reads with a default when absent (one
 * whose absence means blank, such as an address, has nothing to fill). Taken from each release's editor
 * defaults (`git show <rev>:nodes/<type>.html`); test/fixtures/flows/ holds a flow as each release saved it.
 */
const VERSIONS = {
  'graph-gen-config': [
    { release: FIRST, added: { partnerKeyField: 'api_key_service_org' } },
    {
      release: LIMITS,
      added: { answerLimitMiB: '8', listLimitMiB: '64', requestTimeout: '120', keptEventsMiB: '64' },
    },
    {
      // Before the choice every config node sent its key as an API key, with no TLS or proxy node.
      release: ACCESS,
      added: { authType: 'apiKey', authHeader: '', tokenInQuery: false, tls: '', proxy: '' },
    },
    { release: DIALECT, added: { dialect: 'comfyui' } },
  ],
  'graph-gen-pool': [{ release: POOL, added: { strategy: 'soonest' } }],
  'graph-gen-upload': [
    {
      release: FIRST,
      added: {
        mode: 'image',
        filename: 'filename',
        filenameType: 'msg',
        uploadType: 'input',
        overwrite: true,
      },
    },
    { release: INPUTS, added: { payloadIs: 'auto', urlLimit: 100, urlTimeout: 60 } },
    // Local addresses are refused for a node saved before the choice, as for a new one (issue 20).
    { release: ACCESS, added: { urlLocal: false } },
    { release: POOL, added: { pool: '' } },
  ],
  'graph-gen-submit': [
    { release: FIRST, added: { workflow: '', check: false, partner: 'auto' } },
    // A node saved before "new seed each run" keeps its seeds (the editor's default for a new node is on).
    { release: INPUTS, added: { newSeed: false, setByMsg: {} } },
    { release: ACCESS, added: { savedWorkflow: '' } },
    { release: POOL, added: { pool: '' } },
  ],
  'graph-gen-await-job': [
    {
      release: FIRST,
      added: { timeout: '0', timeoutType: 'num', cancelOnTimeout: false, progress: false, previewRate: 2 },
    },
    { release: INPUTS, added: { filesFrom: 'all', fileNodes: '' } },
    // Awaits of a node saved before "resume after a restart" go on after one, as a new node's do.
    { release: ACCESS, added: { resume: true, picture: false } },
    { release: POOL, added: { pool: '', runAgain: false } },
  ],
  'graph-gen-download': [
    { release: FIRST, added: { mode: 'buffer', directory: '', directoryType: 'str', overwrite: false } },
    { release: ACCESS, added: { bufferLimit: 512, picture: false } },
    { release: POOL, added: { pool: '' } },
  ],
  'graph-gen-queue': [
    { release: FIRST, added: { action: 'list' } },
    { release: POOL, added: { pool: '' } },
  ],
  'graph-gen-job-events': [
    { release: ACCESS, added: { events: 'completed,failed,cancelled', clients: 'all' } },
    { release: POOL, added: { pool: '' } },
  ],
  'automation-config': [
    {
      release: FIRST,
      added: {
        deployment: 'self-hosted',
        protocol: 'http',
        apiVersion: '1',
        headerName: 'X-AUTOMATION-API-KEY',
        retries: '3',
        retryDelay: '250',
      },
    },
    { release: LIMITS, added: { pageLimitMiB: '64', requestTimeout: '120' } },
  ],
  'automation-list-workflows': [
    {
      release: FIRST,
      added: {
        active: 'any',
        activeType: 'filter',
        limit: '100',
        limitType: 'num',
        mode: 'page',
        split: 'none',
        maxPages: '10000',
      },
    },
  ],
} as const satisfies Record<string, readonly ConfigVersion[]>;

export type ConfigType = keyof typeof VERSIONS;

/** Every node type's current settings version: what its editor saves as `configVersion`. */
export const CONFIG_VERSIONS: Readonly<Record<ConfigType, number>> = Object.freeze(
  Object.fromEntries(Object.entries(VERSIONS).map(([type, versions]) => [type, versions.length])) as Record<
    ConfigType,
    number
  >,
);

/** A node type's versions, oldest first (for tests and docs); none for a type this package does not have. */
export function configVersionsOf(type: string): readonly ConfigVersion[] {
  return Object.hasOwn(VERSIONS, type) ? VERSIONS[type as ConfigType] : [];
}

/** What a newer node is said with: its version and the newest this code knows. */
export type NewerConfig = { version: number; known: number };

/** Types and versions already said to be newer: each is said once per process, not once per node. */
const toldNewer = new Set<string>();

/** The version a saved node names: a whole number from 0, else 0 (saved before versions, or unreadable). */
function versionOf(value: unknown): number {
  const number = typeof value === 'string' && /^\d{1,9}$/.test(value.trim()) ? Number(value) : value;
  return typeof number === 'number' && Number.isSafeInteger(number) && number >= 0 ? number : 0;
}

/**
 * The node's own settings as a plain object: each own enumerable property that can be read (a getter that
 * throws, or a proxy that refuses, leaves its setting out: then it is absent).
 */
function ownSettings(def: unknown): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  let keys: string[];
  try {
    // A revoked proxy throws even when asked whether it is an array.
    if (def === null || typeof def !== 'object' || Array.isArray(def)) return settings;
    keys = Object.keys(def);
  } catch {
    return settings;
  }
  for (const key of keys) {
    try {
      // Defined, not assigned: `__proto__` stays an ordinary property of this object.
      Object.defineProperty(settings, key, {
        value: (def as Record<string, unknown>)[key],
        enumerable: true,
        writable: true,
        configurable: true,
      });
    } catch {
      // Unreadable: absent.
    }
  }
  return settings;
}

/** A fill of its own: an object default is copied, so no two nodes share one. */
function copyOf(value: SettingValue): unknown {
  return typeof value === 'object' ? { ...value } : value;
}

/**
 * A node's settings at the current version of its type: a copy of `def` in which every setting added since
 * the version it was saved with is present (its old default where the node lacks it), and `configVersion` is
 * the current one. A node of a newer version is returned as it is (copied), said once through `warn`. Never
 * throws: a def that is not an object reads as one without settings, an unknown type is copied as it is.
 */
export function migrateConfig<S = Record<string, unknown>>(
  type: string,
  def: unknown,
  warn?: (newer: NewerConfig) => void,
): S {
  const settings = ownSettings(def);
  const versions = configVersionsOf(type);
  if (versions.length === 0) return settings as S;
  const version = versionOf(settings.configVersion);
  if (version > versions.length) {
    const key = `${type}@${version}`;
    if (!toldNewer.has(key)) {
      toldNewer.add(key);
      try {
        warn?.({ version, known: versions.length });
      } catch {
        // Saying it is the caller's; reading the node goes on.
      }
    }
    return settings as S;
  }
  for (const step of versions.slice(version)) {
    for (const [name, value] of Object.entries(step.added)) {
      if (settings[name] === undefined) settings[name] = copyOf(value);
    }
  }
  settings.configVersion = versions.length;
  return settings as S;
}
