#!/bin/sh
# web_setup.sh DIR: install playwright-core (from npm), which drives the
# browser tests of ledger-web (tests/web/test_web.js), under DIR, once.
# Without npm or the registry, say so and succeed: the browser tests are
# then skipped, saying why.  The browser is Debian's chromium
# (scripts/deps.sh --test), never one playwright would download.
dir=$1
if [ -f "$dir/node_modules/playwright-core/package.json" ]; then
  echo "web_setup: playwright-core is installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "web_setup: no npm or node (scripts/deps.sh --test installs them):" \
       "the browser tests are skipped"
  exit 0
fi
if ! PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 600 npm install \
     --prefix "$dir" --no-audit --no-fund playwright-core; then
  echo "web_setup: npm could not install playwright-core:" \
       "the browser tests are skipped"
fi
exit 0
