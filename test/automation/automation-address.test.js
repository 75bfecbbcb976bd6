'use strict';
const assert = require('node:assert/strict');
const { automationBaseUrl, normalisePathPrefix } = require('../../dist/automation/address');

describe('automation-config address building', () => {
  it('gives one address for every spelling of a path prefix', () => {
    for (const prefix of ['/n8n/', 'n8n', '/n8n', '//n8n//', ' /n8n ']) {
      assert.equal(normalisePathPrefix(prefix), '/n8n', JSON.stringify(prefix));
    }
    for (const prefix of ['', '/', '  ', undefined]) assert.equal(normalisePathPrefix(prefix), '');
    assert.equal(normalisePathPrefix('/a//b/'), '/a/b');
  });

  it('builds self-hosted and cloud base addresses', () => {
    const table = [
      [{ host: 'localhost', port: 5678 }, 'http://localhost:5678/api/v1'],
      [{ host: 'localhost', port: '5678', pathPrefix: '/n8n/' }, 'http://localhost:5678/n8n/api/v1'],
      [{ host: 'localhost', port: '5678', pathPrefix: 'n8n' }, 'http://localhost:5678/n8n/api/v1'],
      [{ protocol: 'https', host: 'auto.example.com', port: '' }, 'https://auto.example.com/api/v1'],
      [{ protocol: 'https', host: 'auto.example.com', port: 443 }, 'https://auto.example.com/api/v1'],
      [{ protocol: 'http', host: 'auto.example.com', port: 80 }, 'http://auto.example.com/api/v1'],
      [{ protocol: 'HTTPS:', host: 'Auto.Example.com', port: 8443 }, 'https://auto.example.com:8443/api/v1'],
      [{ host: 'http://box.lan/', port: 5678 }, 'http://box.lan:5678/api/v1'],
      [{ host: '::1', port: 5678 }, 'http://[::1]:5678/api/v1'],
      [{ host: '10.0.0.2', port: 5678, apiVersion: 2 }, 'http://10.0.0.2:5678/api/v2'],
      [{ host: 'h', apiVersion: 'v3' }, 'http://h/api/v3'],
      [{ host: 'h', apiVersion: '' }, 'http://h/api/v1'],
      [{ deployment: 'cloud', instanceUrl: 'https://acme.auto.example' }, 'https://acme.auto.example/api/v1'],
      [
        { deployment: 'cloud', instanceUrl: 'https://acme.auto.example/' },
        'https://acme.auto.example/api/v1',
      ],
      [
        { deployment: 'cloud', instanceUrl: 'https://acme.auto.example/api/v1' },
        'https://acme.auto.example/api/v1',
      ],
      [
        { deployment: 'cloud', instanceUrl: 'https://x.example/team/', apiVersion: 2 },
        'https://x.example/team/api/v2',
      ],
      // The self-hosted fields are ignored for a cloud instance, and the other way round.
      [
        { deployment: 'cloud', instanceUrl: 'https://c.example', host: 'h', pathPrefix: 'p' },
        'https://c.example/api/v1',
      ],
      [{ deployment: 'self-hosted', host: 'h', instanceUrl: 'https://c.example' }, 'http://h/api/v1'],
    ];
    for (const [settings, expected] of table) {
      assert.equal(automationBaseUrl(settings), expected, JSON.stringify(settings));
    }
  });

  it('refuses settings that make no address, with invalid_input and a sentence', () => {
    const table = [
      [{ host: '' }, /host .* not set/],
      [{ host: 'a b' }, /not a host name/],
      [{ host: 'h', port: 0 }, /port "0"/],
      [{ host: 'h', port: 70000 }, /port "70000"/],
      [{ host: 'h', port: 'x' }, /port "x"/],
      [{ host: 'h', protocol: 'ftp' }, /protocol "ftp"/],
      [{ host: 'h', apiVersion: '1.5' }, /API version "1.5"/],
      [{ host: 'h', apiVersion: 0 }, /API version "0"/],
      [{ deployment: 'cloud', instanceUrl: '' }, /instance address .* not set/],
      [{ deployment: 'cloud', instanceUrl: 'acme.example' }, /not an http\(s\) address/],
      [{ deployment: 'cloud', instanceUrl: 'ftp://acme.example' }, /not an http\(s\) address/],
    ];
    for (const [settings, message] of table) {
      assert.throws(
        () => automationBaseUrl(settings),
        (error) => error.code === 'invalid_input' && message.test(error.message),
        JSON.stringify(settings),
      );
    }
  });
});
