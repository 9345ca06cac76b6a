# Sourced by build-ipxe-iso.sh and build-grub-netboot.sh (and the arm64 tests' disk OS):
# metal-grub-net.cfg for a scheduler URL, and GRUB's EFI modules for an architecture.
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

# grub_modules ARCH: prints the directory of GRUB's EFI modules for ARCH (arm64, x86_64).
# arm64's come from Debian's grub-efi-arm64-bin, fetched with apt-get download (dpkg's arm64
# architecture: scripts/setup adds it) and unpacked into ${METAL_GRUB_CACHE:-/var/cache/metal/grub},
# never installed; x86_64's are the installed grub-efi-amd64-bin's.
grub_modules() {
  local cache modules
  case $1 in
    arm64)
      cache=${METAL_GRUB_CACHE:-/var/cache/metal/grub}/arm64
      modules=$cache/root/usr/lib/grub/arm64-efi
      if [ ! -f "$modules/http.mod" ]; then
        echo "$(basename "$0"): fetching grub-efi-arm64-bin" >&2
        rm -rf "$cache" && mkdir -p "$cache"
        (cd "$cache" && apt-get download -q grub-efi-arm64-bin:arm64 >/dev/null 2>&1) || {
          echo "$(basename "$0"): cannot fetch grub-efi-arm64-bin:arm64 (apt-get update? dpkg --add-architecture arm64?)" >&2
          return 1
        }
        dpkg -x "$cache"/grub-efi-arm64-bin_*.deb "$cache/root"
        rm -f "$cache"/*.deb
      fi
      ;;
    x86_64) modules=/usr/lib/grub/x86_64-efi ;;
    *) echo "$(basename "$0"): unknown GRUB architecture $1 (arm64 or x86_64)" >&2; return 2 ;;
  esac
  [ -f "$modules/http.mod" ] || { echo "$(basename "$0"): $modules has no GRUB modules" >&2; return 1; }
  echo "$modules"
}
