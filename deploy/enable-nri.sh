#!/bin/bash
# Enables NRI in containerd 1.7 (2.x has it on by default), on the node, as root:
#
#   deploy/enable-nri.sh [--config /etc/containerd/config.toml] [--no-restart]
#
# Safe to run again: it changes nothing when NRI is already enabled. It keeps a copy of the config
# (config.toml.before-nri), writes the new one atomically, and restarts containerd, which keeps
# running containers (their shims outlive the daemon); the kubelet reconnects by itself.
set -euo pipefail
config=/etc/containerd/config.toml
restart=1
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config="$2"; shift 2 ;;
    --no-restart) restart=0; shift ;;
    *) echo "enable-nri.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

section='[plugins."io.containerd.nri.v1.nri"]'
if [ -f "$config" ] && grep -qF "$section" "$config"; then
  # The section exists: NRI is on unless it says disable = true.
  if awk -v s="$section" '
      index($0, s) == 1 { on = 1; next }
      /^\[/ { on = 0 }
      on && /^[[:space:]]*disable[[:space:]]*=[[:space:]]*true/ { found = 1 }
      END { exit !found }' "$config"; then
    cp -p "$config" "$config.before-nri"
    tmp=$(mktemp "$config.XXXXXX")
    awk -v s="$section" '
      index($0, s) == 1 { on = 1; print; next }
      /^\[/ { on = 0 }
      on && /^[[:space:]]*disable[[:space:]]*=/ { sub(/true/, "false") }
      { print }' "$config" >"$tmp"
    mv "$tmp" "$config"
    echo "enable-nri.sh: $config: NRI was disabled; enabled"
  else
    echo "enable-nri.sh: $config: NRI is already enabled"
    exit 0
  fi
else
  if [ -f "$config" ]; then
    cp -p "$config" "$config.before-nri"
    version=$(awk -F= '/^[[:space:]]*version[[:space:]]*=/ { gsub(/[[:space:]]/, "", $2); print $2; exit }' "$config")
    if [ -n "$version" ] && [ "$version" != 2 ]; then
      echo "enable-nri.sh: $config is config version $version; add $section with disable = false by hand" >&2
      exit 1
    fi
  fi
  tmp=$(mktemp "$config.XXXXXX")
  { [ -f "$config" ] && cat "$config" || echo "version = 2"
    printf '\n%s\n  disable = false\n  socket_path = "/var/run/nri/nri.sock"\n' "$section"
  } >"$tmp"
  mv "$tmp" "$config"
  echo "enable-nri.sh: $config: NRI enabled"
fi
if [ "$restart" = 1 ]; then
  systemctl restart containerd
  echo "enable-nri.sh: containerd restarted"
fi
