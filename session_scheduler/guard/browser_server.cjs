// The browser's MCP server: @playwright/mcp (pinned in package.json) with exactly the tools named in
// $BROWSER_TOOLS (a JSON list), run in the browser's box by guard/browser_box.py.
//
// Why a launcher: @playwright/mcp's `--caps` only ADDS capabilities; every "core*" tool is always on,
// and core holds browser_evaluate, browser_run_code_unsafe and browser_file_upload. Its tool table is
// one exported array that both `tools/list` and `tools/call` read, so it is pruned in place before the
// server starts. Fails closed: a missing table, a named tool this version lacks, or any other tool left
// over ends the process before it listens.
'use strict';

const path = require('path');

function fail(message) {
  process.stderr.write(`browser_server: ${message}\n`);
  process.exit(2);
}

let names;
try {
  names = JSON.parse(process.env.BROWSER_TOOLS || '');
} catch {
  fail('BROWSER_TOOLS names no tool (not JSON)');
}
if (!Array.isArray(names) || names.length === 0 || names.some((name) => typeof name !== 'string')) {
  fail('BROWSER_TOOLS names no tool (a JSON list of tool names is needed)');
}
const allowed = new Set(names);

const mcpDir = path.dirname(require.resolve('@playwright/mcp/package.json'));
const core = require(require.resolve('playwright-core/lib/coreBundle', { paths: [mcpDir] }));
const table = core.tools && core.tools.browserTools;
if (!Array.isArray(table)) fail('this @playwright/mcp has no tool table to prune');

const known = new Set(table.map((tool) => tool.schema.name));
const absent = [...allowed].filter((name) => !known.has(name));
if (absent.length) fail(`this @playwright/mcp has no ${absent.join(', ')}`);
for (let i = table.length - 1; i >= 0; i--) {
  if (!allowed.has(table[i].schema.name)) table.splice(i, 1);
}
const served = core.tools.filteredTools({ capabilities: [] }).map((tool) => tool.schema.name);
if (served.length !== allowed.size || served.some((name) => !allowed.has(name))) {
  fail(`the pruned server would serve ${served.join(', ')}`);
}

require(path.join(mcpDir, 'cli.js'));
