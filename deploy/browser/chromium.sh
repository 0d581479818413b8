#!/usr/bin/env bash
# The headless browser the console's tests drive (Selenium): Debian's chromium and chromium-driver.
# Usage: deploy/browser/chromium.sh install   (installs from Debian's packages when missing)
#        deploy/browser/chromium.sh status
set -euo pipefail

have() { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }

case "${1:-status}" in
  install)
    if have; then
      echo "chromium: $(chromium --version 2>/dev/null | head -1), $(chromedriver --version | head -1)"
      exit 0
    fi
    command -v apt-get >/dev/null || { echo "chromium: not found and no apt-get: install chromium + chromedriver" >&2; exit 1; }
    echo "chromium: installing chromium chromium-driver from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q chromium chromium-driver >/dev/null
    have || { echo "chromium: install did not provide chromium and chromedriver" >&2; exit 1; }
    echo "chromium: $(chromium --version 2>/dev/null | head -1)"
    ;;
  status)
    if have; then echo "chromium: $(chromium --version 2>/dev/null | head -1)"; else echo "chromium: missing"; exit 3; fi
    ;;
  *) echo "usage: $0 install|status" >&2; exit 2 ;;
esac
