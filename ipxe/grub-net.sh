# Sourced by build-ipxe-iso.sh and build-grub-netboot.sh: writes metal-grub-net.cfg for a
# scheduler URL.
#
# grub_net_cfg URL CLAIM: prints the chain for the scheduler at URL (http:// only: GRUB's
# network stack has no TLS), CLAIM empty or "claim=CLAIM&".
grub_net_cfg() {
  local url=$1 claim=$2 rest hostport prefix=
  if [[ $url != http://* ]]; then
    echo "$(basename "$0"): GRUB needs an http:// URL (its network stack has no TLS), not $url" >&2
    return 2
  fi
  rest=${url#http://}
  hostport=${rest%%/*}
  [[ $rest == */* ]] && prefix=/${rest#*/}
  [[ $hostport == *:* ]] || hostport=$hostport:80
  sed -e '/^#/d' -e "s|@METAL_DEVICE@|(http,$hostport)$prefix|" -e "s|@METAL_URL@|$url|" \
    -e "s|@METAL_CLAIM@|${claim//&/\\&}|" "$(dirname "${BASH_SOURCE[0]}")/metal-grub-net.cfg"
}
