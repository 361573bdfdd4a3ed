#!/bin/sh
# mcp_setup.sh DIR: install the reference MCP servers tests/test_mcp.c runs
# (server-filesystem and server-everything, from npm) under DIR, once.
# Without npm or the registry, say so and succeed: the tests that need
# them are skipped, saying why.
dir=$1
ok=1
for p in server-filesystem server-everything; do
  [ -f "$dir/node_modules/@modelcontextprotocol/$p/dist/index.js" ] || ok=
done
if [ -n "$ok" ]; then
  echo "mcp_setup: the reference servers are installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "mcp_setup: no npm or node (scripts/deps.sh --test installs them):" \
       "the tests of the reference MCP servers are skipped"
  exit 0
fi
if ! timeout 600 npm install --prefix "$dir" --no-audit --no-fund \
     @modelcontextprotocol/server-filesystem \
     @modelcontextprotocol/server-everything; then
  echo "mcp_setup: npm could not install the reference MCP servers:" \
       "their tests are skipped"
fi
exit 0
