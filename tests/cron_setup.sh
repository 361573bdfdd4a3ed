#!/bin/sh
# cron_setup.sh DIR: install the npm package cron-parser, which
# tests/cron_diff.js checks the cron parser against, under DIR, once.
# Without npm or the registry, say so and succeed: the differential test
# is then skipped, saying why.
dir=$1
if [ -f "$dir/node_modules/cron-parser/package.json" ]; then
  echo "cron_setup: cron-parser is installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "cron_setup: no npm or node (scripts/deps.sh --test installs them):" \
       "the cron differential test is skipped"
  exit 0
fi
if ! timeout 600 npm install --prefix "$dir" --no-audit --no-fund \
     cron-parser@5; then
  echo "cron_setup: npm could not install cron-parser: the cron" \
       "differential test is skipped"
fi
exit 0
