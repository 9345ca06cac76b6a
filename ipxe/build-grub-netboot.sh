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
# arm64 (the default) takes GRUB's modules from Debian's grub-efi-arm64-bin, downloaded and
# unpacked, never installed (grub-net.sh's grub_modules); x86_64 takes the installed
# grub-efi-amd64-bin's. grub-mkstandalone (grub-common) writes either.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=ipxe/grub-net.sh
. "$here/grub-net.sh"

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
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
modules=$(grub_modules "$arch")
format=$arch-efi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# GRUB writes to the firmware's console, which a server's firmware redirects to its serial
# port (as AAVMF and OVMF do).
grub_net_cfg "$url" "" > "$stage/grub.cfg"
# Every module goes in its memdisk: finding a disk's loader (the scheduler's "boot the next
# device") probes every filesystem GRUB knows.
grub-mkstandalone -O "$format" -d "$modules" -o "$out.part" \
  --modules="normal efinet http linux part_gpt part_msdos fat search chain" --locales= --fonts= --themes= \
  "boot/grub/grub.cfg=$stage/grub.cfg"
mv "$out.part" "$out"
echo "build-grub-netboot: $out ($(du -h "$out" | cut -f1), $arch) boots through $url"
