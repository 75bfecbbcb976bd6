'use strict';
// Real servers in front of a service, from Debian's packages, for the tests of protected servers: a certificate
// authority and certificates the test makes with openssl, nginx terminating TLS with basic auth or a bearer check
// and forwarding HTTP and WebSocket, and tinyproxy as a forward proxy. Each listens on 127.0.0.1 only, on a free
// port, from config files written under a temporary folder, and is stopped by its PID. The nginx settings are the
// ones the README shows as a starting point.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync, spawn } = require('node:child_process');
const net = require('node:net');
const { freePort } = require('../../../scripts/start');

/** The folder with the test's files; removed by `stopAll`. */
function workFolder() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-protected-'));
}

/** Whether a program is on this machine (the suite names the package to install when it is not). */
function have(program) {
  for (const dir of ['/usr/sbin', '/usr/bin', '/sbin', '/bin', ...(process.env.PATH ?? '').split(':')]) {
    if (dir && fs.existsSync(path.join(dir, program))) return path.join(dir, program);
  }
  return undefined;
}

function openssl(args, cwd) {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/**
 * A certificate authority, a server certificate it signed for 127.0.0.1 and localhost, and a client certificate
 * it signed; also a second authority that signed nothing here (the "unknown CA"). Elliptic-curve keys: quick to
 * make. Returns the files' paths and contents.
 */
function makeCertificates(dir) {
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  for (const ca of ['ca', 'other-ca']) {
    openssl(
      [
        'req',
        '-x509',
        ...key,
        '-keyout',
        `${ca}.key`,
        '-out',
        `${ca}.crt`,
        '-days',
        '2',
        '-subj',
        `/CN=graph-gen test ${ca}`,
      ],
      dir,
    );
  }
  const sign = (name, extensions) => {
    openssl(
      ['req', ...key, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=graph-gen test ${name}`],
      dir,
    );
    fs.writeFileSync(path.join(dir, `${name}.ext`), extensions);
    openssl(
      [
        'x509',
        '-req',
        '-in',
        `${name}.csr`,
        '-CA',
        'ca.crt',
        '-CAkey',
        'ca.key',
        '-CAcreateserial',
        '-out',
        `${name}.crt`,
        '-days',
        '2',
        '-extfile',
        `${name}.ext`,
      ],
      dir,
    );
  };
  sign(
    'server',
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n',
  );
  sign('client', 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n');
  const file = (name) => path.join(dir, name);
  const read = (name) => fs.readFileSync(file(name), 'utf8');
  return {
    caFile: file('ca.crt'),
    ca: read('ca.crt'),
    otherCa: read('other-ca.crt'),
    serverCert: file('server.crt'),
    serverKey: file('server.key'),
    clientCert: read('client.crt'),
    clientKey: read('client.key'),
  };
}

const running = new Set();

/** Starts a server in the foreground (so its PID is the one to stop) and waits until its port answers. */
async function startProcess(command, args, port, logFile) {
  const log = fs.openSync(logFile, 'a');
  const child = spawn(command, args, { stdio: ['ignore', log, log] });
  fs.closeSync(log);
  running.add(child);
  let exited;
  child.once('exit', (code, signal) => {
    exited = `${command} exited (${code ?? signal}): ${fs.readFileSync(logFile, 'utf8').slice(-1500)}`;
    running.delete(child);
  });
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited) throw new Error(exited);
    if (await answers(port)) return child;
    if (Date.now() > deadline)
      throw new Error(`${command} did not listen on ${port}: ${fs.readFileSync(logFile, 'utf8')}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function answers(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * What forwards one location to the service, HTTP and WebSocket alike: HTTP/1.1 to the service, the Upgrade
 * and Connection headers passed on, no buffering (live events and large files stream), long timeouts (a socket
 * stays open while jobs run).
 */
function forwardTo(upstream) {
  return `
      proxy_pass ${upstream};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 1h;
      proxy_send_timeout 1h;`;
}

/**
 * nginx in front of `upstream` (http://127.0.0.1:port): one TLS server with basic auth (user and password as
 * given, stored as an apr1 hash), one TLS server that takes `Authorization: Bearer <token>` on every request
 * and, on the socket, `?token=<token>` instead (as ComfyUI-Login does), and one that asks for a client
 * certificate signed by the test's CA. Resolves to their addresses.
 */
async function startNginx(dir, certificates, upstream, { user, password, token }) {
  const nginx = have('nginx');
  if (!nginx) throw new Error('nginx is missing: apt-get install nginx (.ci/run installs it)');
  const hash = execFileSync('openssl', ['passwd', '-apr1', password], { encoding: 'utf8' }).trim();
  fs.writeFileSync(path.join(dir, 'htpasswd'), `${user}:${hash}\n`);
  const [basicPort, bearerPort, clientCertPort] = [await freePort(), await freePort(), await freePort()];
  for (const temp of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'])
    fs.mkdirSync(path.join(dir, temp), { recursive: true });
  const tls = `
    ssl_certificate ${certificates.serverCert};
    ssl_certificate_key ${certificates.serverKey};`;
  const config = `
# As root, nginx's workers would run as nobody, who cannot read the test's private folder.
${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/nginx-error.log warn;
events { worker_connections 128; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  client_max_body_size 100m;

  # "Connection: upgrade" for a WebSocket handshake, "close" otherwise.
  map $http_upgrade $connection_upgrade {
    default upgrade;
    '' close;
  }

  # Basic auth over TLS: every request and the socket's handshake need the user and password.
  server {
    listen 127.0.0.1:${basicPort} ssl;
    ${tls}
    auth_basic "ComfyUI";
    auth_basic_user_file ${dir}/htpasswd;
    location / {${forwardTo(upstream)}
    }
  }

  # A bearer token over TLS; the socket may carry it as ?token= instead (ComfyUI-Login's way).
  server {
    listen 127.0.0.1:${bearerPort} ssl;
    ${tls}
    set $token_ok 0;
    if ($http_authorization = "Bearer ${token}") { set $token_ok 1; }
    location = /ws {
      if ($arg_token = "${token}") { set $token_ok 1; }
      if ($token_ok = 0) { return 401; }${forwardTo(upstream)}
    }
    location / {
      if ($token_ok = 0) { return 401; }${forwardTo(upstream)}
    }
  }

  # A client certificate signed by the test's CA, over TLS.
  server {
    listen 127.0.0.1:${clientCertPort} ssl;
    ${tls}
    ssl_client_certificate ${certificates.caFile};
    ssl_verify_client on;
    location / {${forwardTo(upstream)}
    }
  }
}
`;
  const file = path.join(dir, 'nginx.conf');
  fs.writeFileSync(file, config);
  await startProcess(nginx, ['-c', file, '-p', dir], clientCertPort, path.join(dir, 'nginx.log'));
  await Promise.all([basicPort, bearerPort].map((port) => waitFor(port)));
  return {
    basic: `https://127.0.0.1:${basicPort}`,
    bearer: `https://127.0.0.1:${bearerPort}`,
    clientCert: `https://127.0.0.1:${clientCertPort}`,
    config,
  };
}

async function waitFor(port) {
  const deadline = Date.now() + 10_000;
  while (!(await answers(port))) {
    if (Date.now() > deadline) throw new Error(`nothing listens on ${port}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * tinyproxy on a free port. `user`/`password`: it asks for them (407 without). `connectPorts`: the only ports
 * it tunnels to (a proxy that refuses the service's port answers 403).
 */
async function startTinyproxy(dir, name, { user, password, connectPorts = [] } = {}) {
  const tinyproxy = have('tinyproxy');
  if (!tinyproxy) throw new Error('tinyproxy is missing: apt-get install tinyproxy (.ci/run installs it)');
  const port = await freePort();
  const lines = [
    `Port ${port}`,
    'Listen 127.0.0.1',
    'Timeout 600',
    'MaxClients 50',
    'LogLevel Connect',
    `LogFile "${dir}/${name}.log"`,
    `PidFile "${dir}/${name}.pid"`,
    'Allow 127.0.0.1',
    ...(user ? [`BasicAuth ${user} ${password}`] : []),
    ...connectPorts.map((allowed) => `ConnectPort ${allowed}`),
  ];
  const file = path.join(dir, `${name}.conf`);
  fs.writeFileSync(file, `${lines.join('\n')}\n`);
  await startProcess(tinyproxy, ['-d', '-c', file], port, path.join(dir, `${name}.out`));
  return { url: `http://127.0.0.1:${port}`, port, log: path.join(dir, `${name}.log`) };
}

/** Stops every server this file started, by its PID, and waits until each has exited. */
async function stopAll() {
  await Promise.all(
    [...running].map(
      (child) =>
        new Promise((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
          child.once('exit', () => {
            clearTimeout(force);
            resolve();
          });
          // nginx's fast shutdown; tinyproxy ends on TERM.
          child.kill('SIGTERM');
        }),
    ),
  );
}

module.exports = { workFolder, makeCertificates, startNginx, startTinyproxy, stopAll, have };
