#!/bin/sh
# mcp_tap.sh LOG COMMAND ARG...: run an MCP server over stdio, appending
# every line it is sent to LOG (tests/test_mcp.c counts the calls a server
# received across an engine's crash).
log=$1
shift
tee -a "$log" | "$@"
