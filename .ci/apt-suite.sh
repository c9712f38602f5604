#!/bin/bash
# Adds Debian suite $1 (trixie, bookworm-backports, …) to apt, pinned low (100), so nothing is taken
# from it unless named as pkg/$1. The archive's address and keyring are the ones this machine
# already uses for bookworm: no host name is written into this repository. Idempotent; needs root.
# Does not run `apt-get update`: the caller does, once.
set -euo pipefail
suite=${1:?usage: apt-suite.sh SUITE}

archive() {
  # deb822 sources: the URIs and Signed-By of a stanza whose Suites include bookworm.
  awk 'BEGIN { RS = "" }
       /Suites:[^\n]*bookworm([ \n]|$)/ {
         u = ""; k = "/usr/share/keyrings/debian-archive-keyring.gpg"
         for (i = 1; i <= NF; i++) { if ($i == "URIs:") u = $(i + 1); if ($i == "Signed-By:") k = $(i + 1) }
         if (u != "") { print u, k; exit }
       }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
  # one-line sources: deb URI bookworm main
  awk '$1 == "deb" && $3 == "bookworm" { print $2, "/usr/share/keyrings/debian-archive-keyring.gpg"; exit }' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true
}

# Already configured (by us or by the machine's owner): leave it.
if grep -rqsE "(Suites:|^deb [^ ]+)[^#]*[[:space:]]${suite}([[:space:]]|$)" \
  /etc/apt/sources.list /etc/apt/sources.list.d/; then
  exit 0
fi
read -r uri keyring < <(archive | head -n1) || true
if [ -z "${uri:-}" ]; then
  echo "apt-suite.sh: no bookworm archive in this machine's apt sources to add ${suite} from" >&2
  exit 1
fi
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
  "$uri" "$suite" "$keyring" >"/etc/apt/sources.list.d/dranet-${suite}.sources"
printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n' "$suite" \
  >"/etc/apt/preferences.d/dranet-${suite}"
