#!/usr/bin/env node
/**
 * Runs the sandbox as a process of its own: `node dist/sandbox/cli.js [options]`. `npm start` and the browser
 * tests use it so the example flows have both services to talk to with nothing configured. The package ships
 * it as the `graph-gen-sandbox` command, so users can try the nodes and their flows without an account.
 *
 * Options (each also readable from the environment variable in brackets):
 *   --port <n>             [SANDBOX_PORT]             port on 127.0.0.1 (default 0: any free port)
 *   --workflows <n>        [SANDBOX_WORKFLOWS]        automation workflows to seed (default 42)
 *   --generation-key <k>   [SANDBOX_GENERATION_KEY]   key the generation service expects; none = self-hosted
 *   --automation-key <k>   [SANDBOX_AUTOMATION_KEY]   key the automation service expects; none = any
 *   --dialect <d>          [SANDBOX_DIALECT]          comfyui (default) or comfy-api-v2 (routes under /api/v2)
 *   --token <t>            [SANDBOX_TOKEN]            comfy-api-v2: bearer token it expects; none = open
 *
 * Prints `graph-gen sandbox listening at <url>` once it listens (parents read the address from that line),
 * and stops on SIGINT/SIGTERM or when the process that started it goes away.
 */
import { startSandbox, type SandboxDialect } from './index';

export interface CliOptions {
  port: number;
  workflows: number;
  generationKey?: string;
  automationKey?: string;
  /** Present only when asked for (the default speaks today's API). */
  dialect?: SandboxDialect;
  token?: string;
}

const DIALECTS: readonly SandboxDialect[] = ['comfyui', 'comfy-api-v2'];

const FLAGS: Record<string, { env: string; key: keyof CliOptions; arg: string; help: string }> = {
  '--port': {
    env: 'SANDBOX_PORT',
    key: 'port',
    arg: '<n>',
    help: 'port on 127.0.0.1 (default 0: any free port)',
  },
  '--workflows': {
    env: 'SANDBOX_WORKFLOWS',
    key: 'workflows',
    arg: '<n>',
    help: 'automation workflows to seed (default 42)',
  },
  '--generation-key': {
    env: 'SANDBOX_GENERATION_KEY',
    key: 'generationKey',
    arg: '<key>',
    help: 'key the generation service expects; none = self-hosted',
  },
  '--automation-key': {
    env: 'SANDBOX_AUTOMATION_KEY',
    key: 'automationKey',
    arg: '<key>',
    help: 'key the automation service expects; none = any key',
  },
  '--dialect': {
    env: 'SANDBOX_DIALECT',
    key: 'dialect',
    arg: '<d>',
    help: 'comfyui (default) or comfy-api-v2 (Comfy API v2, routes under /api/v2)',
  },
  '--token': {
    env: 'SANDBOX_TOKEN',
    key: 'token',
    arg: '<token>',
    help: 'comfy-api-v2: bearer token it expects; none = open',
  },
};

/** What `--help` prints: a user who installed the package meets the sandbox as a command, not as source. */
export function usage(): string {
  const lines = Object.entries(FLAGS).map(
    ([flag, { env, arg, help }]) => `  ${`${flag} ${arg}`.padEnd(25)}${help} (or ${env})`,
  );
  return [
    'usage: graph-gen-sandbox [options]',
    '',
    'A local stand-in for the generation service and the automation service, for trying',
    "@graph-gen/node-red's nodes and example flows without an account or a GPU. It runs",
    'workflows of the common node types (checkpoint loader, text encode, KSampler, VAE, LoRA,',
    'load/save/preview image: those of the examples) and answers with placeholder images.',
    'Ctrl-C stops it.',
    '',
    ...lines,
    '  --help                   this text',
    '',
    "Point a graph-gen-config node's base address at the printed address (no API key unless",
    "--generation-key is given), and an automation-config node's cloud instance address at it.",
    '',
  ].join('\n');
}

function wholeNumber(name: string, text: string): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a whole number, not "${text}"`);
  return value;
}

/** Reads the options from arguments first, then the environment. Pure, so it is easy to test. */
export function parseCliOptions(argv: string[], env: NodeJS.ProcessEnv): CliOptions {
  const raw: Partial<Record<keyof CliOptions, string>> = {};
  for (const { env: name, key } of Object.values(FLAGS)) {
    if (env[name]) raw[key] = env[name];
  }
  for (let index = 0; index < argv.length; index++) {
    const [flag, inline] = argv[index].split(/=(.*)/s, 2);
    const known = FLAGS[flag];
    if (!known) throw new Error(`unknown option ${flag} (known: ${Object.keys(FLAGS).join(', ')})`);
    const value = inline ?? argv[++index];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    raw[known.key] = value;
  }
  if (raw.dialect && !(DIALECTS as readonly string[]).includes(raw.dialect))
    throw new Error(`--dialect must be one of ${DIALECTS.join(', ')}, not "${raw.dialect}"`);
  return {
    port: wholeNumber('--port', raw.port ?? '0'),
    workflows: wholeNumber('--workflows', raw.workflows ?? '42'),
    generationKey: raw.generationKey || undefined,
    automationKey: raw.automationKey || undefined,
    ...(raw.dialect ? { dialect: raw.dialect as SandboxDialect } : {}),
    ...(raw.token ? { token: raw.token } : {}),
  };
}

async function main(): Promise<void> {
  if (process.argv.slice(2).some((arg) => arg === '--help' || arg === '-h')) {
    process.stdout.write(usage());
    return;
  }
  const options = parseCliOptions(process.argv.slice(2), process.env);
  const sandbox = await startSandbox({
    port: options.port,
    generationApiKey: options.generationKey,
    automation: { apiKey: options.automationKey, workflows: options.workflows },
    dialect: options.dialect,
    v2: { token: options.token },
  });
  if (sandbox.upstream) {
    process.stdout.write(`graph-gen sandbox listening at ${sandbox.url}\n`);
    process.stdout.write(
      `  generation service: ${sandbox.url}/api/v2 (Comfy API v2, ${options.token ? 'expects the bearer token' : 'no token'})\n` +
        `  the engine behind it: ${sandbox.upstream.url} (today's API, self-hosted)\n` +
        `  automation service: ${sandbox.upstream.url}/api/v1/workflows (${options.workflows} workflows, ` +
        `${options.automationKey ? 'expects a key' : 'any key'})\n`,
    );
  } else {
    if (options.generationKey) {
      // Its downloads redirect to a storage host on this machine, which Node-RED follows only when trusted.
      // Written before the line start.js waits for, which then finds it.
      process.stdout.write(
        `  storage host: ${sandbox.generation.storageUrl} (start Node-RED with GRAPH_GEN_TRUSTED_ORIGINS=${sandbox.generation.storageUrl} to download from it)\n`,
      );
    }
    process.stdout.write(`graph-gen sandbox listening at ${sandbox.url}\n`);
    process.stdout.write(
      `  generation service: ${sandbox.url} (${options.generationKey ? 'expects a key' : 'self-hosted, no key'})\n` +
        `  automation service: ${sandbox.url}/api/v1/workflows (${options.workflows} workflows, ` +
        `${options.automationKey ? 'expects a key' : 'any key'})\n`,
    );
  }

  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    // Never hang on a socket that will not close: a sandbox that lingers would hold its port.
    setTimeout(() => process.exit(0), 2000).unref();
    sandbox.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  // A parent killed without a chance to stop us (SIGKILL) would otherwise leave an orphan holding the port.
  const parent = process.ppid;
  setInterval(() => {
    try {
      process.kill(parent, 0);
    } catch {
      stop();
    }
  }, 1000).unref();
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`graph-gen sandbox: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
