'use strict';
// `npm run fuzz`: the property-based tests alone, with many more runs than `npm test` gives them.
process.env.FUZZ_RUNS ??= '20000';
module.exports = {
  spec: ['test/fuzz/**/*.test.js'],
  require: ['test/support/setup.js'],
  reporter: 'test/support/summary-reporter.js',
  timeout: 0,
};
