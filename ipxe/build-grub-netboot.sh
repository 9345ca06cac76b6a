#!/usr/bin/env bash
# Builds the PXE bootfile for UEFI machines that get GRUB rather than iPXE: a standalone
# GRUB EFI application with ipxe/metal-grub-net.cfg embedded, pointing at the metal
# scheduler. Debian ships no arm64 iPXE, so this is what an arm64 (Grace-class) machine's
# firmware fetches over TFTP when DHCP sees its client architecture 11 (ipxe/dnsmasq.conf);
# it takes an address, asks /boot/grub?mac=&arch=arm64 and loads the arm64 ramdisk over
# plain HTTP.
#
#   ipxe/build-grub-netboot.sh --url http://10.0.0.1:7450 [--arch arm64|x86_64] OUT.efi
#
# arm64 (the default) takes GRUB's modules from Debian's grub-efi-arm64-bin, fetched with
# apt-get download (dpkg's arm64 architecture: scripts/setup adds it) and unpacked into
# ${METAL_GRUB_CACHE:-/var/cache/metal/grub}, never installed; x86_64 takes the installed
# grub-efi-amd64-bin's. grub-mkstandalone (grub-common) writes either.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=ipxe/grub-net.sh
. "$here/grub-net.sh"

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
url=
arch=arm64
out=
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=${2:-}; shift 2 ;;
    --arch) arch=${2:-}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "build-grub-netboot: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "build-grub-netboot: one output file only" >&2; exit 2; }; out=$1; shift ;;
  esac
done
if [ -z "$url" ] || [ -z "$out" ]; then
  echo "build-grub-netboot: needs --url URL and an output file (see --help)" >&2
  exit 2
fi
case $arch in
  arm64)
    cache=${METAL_GRUB_CACHE:-/var/cache/metal/grub}/arm64
    modules=$cache/root/usr/lib/grub/arm64-efi
    if [ ! -f "$modules/http.mod" ]; then
      echo "build-grub-netboot: fetching grub-efi-arm64-bin"
      rm -rf "$cache" && mkdir -p "$cache"
      (cd "$cache" && apt-get download -q grub-efi-arm64-bin:arm64 >/dev/null 2>&1) || {
        echo "build-grub-netboot: cannot fetch grub-efi-arm64-bin:arm64 (apt-get update? dpkg --add-architecture arm64?)" >&2
        exit 1
      }
      dpkg -x "$cache"/grub-efi-arm64-bin_*.deb "$cache/root"
      rm -f "$cache"/*.deb
    fi
    format=arm64-efi
    ;;
  x86_64) modules=/usr/lib/grub/x86_64-efi; format=x86_64-efi ;;
  *) echo "build-grub-netboot: unknown --arch $arch (arm64 or x86_64)" >&2; exit 2 ;;
esac
[ -f "$modules/http.mod" ] || { echo "build-grub-netboot: $modules has no GRUB modules" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# GRUB writes to the firmware's console, which a server's firmware redirects to its serial
# port (as AAVMF and OVMF do).
grub_net_cfg "$url" "" > "$stage/grub.cfg"
# Only the modules the chain uses go in its memdisk: a firmware's TFTP is slow, and so is
# one under emulation.
grub-mkstandalone -O "$format" -d "$modules" -o "$out.part" \
  --install-modules="normal configfile echo test true sleep eval efinet net tftp http linux gzio" \
  --modules="normal efinet http linux" --locales= --fonts= --themes= \
  "boot/grub/grub.cfg=$stage/grub.cfg"
mv "$out.part" "$out"
echo "build-grub-netboot: $out ($(du -h "$out" | cut -f1), $arch) boots through $url"
