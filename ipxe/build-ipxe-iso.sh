#!/usr/bin/env bash
# Builds the virtual-media ISO: Debian's iPXE with ipxe/metal.ipxe embedded, pointing at the
# metal scheduler. A BMC mounts it as a virtual CD; the machine boots it, iPXE takes an
# address by DHCP and chains to the scheduler's /boot/ipxe for this machine's MAC.
#
#   ipxe/build-ipxe-iso.sh --url http://10.0.0.1:7450 OUT.iso            # BIOS: isolinux
#   ipxe/build-ipxe-iso.sh --url http://10.0.0.1:7450 --hybrid OUT.iso   # BIOS + UEFI: GRUB
#   ipxe/build-ipxe-iso.sh --url URL [--hybrid] --claim-template DIR/media.iso
#
# --claim-template: the scheduler's virtual-media template (boot-media-url; the file goes in
# the boot files directory as media.iso). Its scripts ask for /boot/ipxe?claim=PLACEHOLDER
# (GRUB: /boot/grub?claim=), and the scheduler serves each teardown boot a copy with the
# placeholder replaced by that boot's claim, so only that ISO takes the boot, not any host
# that names the machine's MAC.
#
# BIOS: isolinux starts ipxe.lkrn (package ipxe) with the script as its initrd; iPXE runs an
# initrd that starts with "#!ipxe" as its script. --hybrid: grub-mkrescue; under BIOS GRUB
# does the same with linux16/initrd16. Under UEFI, Debian's 2019 ipxe.efi cannot take an
# embedded script (no autoexec.ipxe), so GRUB does the chain itself with its own network
# stack: DHCP, then the scheduler's /boot/grub?mac= for each card (the same decision as
# /boot/ipxe, in GRUB's language), whose kernel and initrd GRUB fetches over HTTP (plain
# HTTP only: GRUB has no TLS). Packages: ipxe, isolinux, syslinux-common, xorriso,
# grub-common, grub-pc-bin, grub-efi-amd64-bin, mtools (scripts/setup installs them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=ipxe/grub-net.sh
. "$here/grub-net.sh"

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
# The same 64 characters as metal_machines::metal::boot::media::PLACEHOLDER.
placeholder=metal-media-claim-placeholder-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
url=
hybrid=0
claim=
out=
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=${2:-}; shift 2 ;;
    --hybrid) hybrid=1; shift ;;
    --claim-template) claim="claim=$placeholder\&"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "build-ipxe-iso: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "build-ipxe-iso: one output file only" >&2; exit 2; }; out=$1; shift ;;
  esac
done
if [ -z "$url" ] || [ -z "$out" ]; then
  echo "build-ipxe-iso: needs --url URL and an output file (see --help)" >&2
  exit 2
fi
# The URL lands in an iPXE script: allow only what a URL of a host and port needs.
if ! [[ $url =~ ^https?://[A-Za-z0-9.:_-]+(\[[0-9A-Fa-f:]+\])?(:[0-9]+)?(/[A-Za-z0-9._~/-]*)?$ ]]; then
  echo "build-ipxe-iso: --url $url is not an http(s)://HOST[:PORT][/PATH] URL" >&2
  exit 2
fi
url=${url%/}
for f in /usr/lib/ipxe/ipxe.lkrn; do
  [ -f "$f" ] || { echo "build-ipxe-iso: $f is missing (apt-get install ipxe)" >&2; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
sed -e "s|@METAL_URL@|$url|g" -e "s|/boot/ipxe?mac=|/boot/ipxe?${claim}mac=|" "$here/metal.ipxe" > "$stage/metal.ipx"
cp /usr/lib/ipxe/ipxe.lkrn "$stage/ipxe.lkr"

if [ "$hybrid" = 1 ]; then
  mkdir -p "$stage/boot/grub"
  grub_net_cfg "$url" "${claim//\\/}" > "$stage/boot/grub/net.cfg"
  cat > "$stage/boot/grub/grub.cfg" <<CFG
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=1
menuentry "metal: network boot through $url" {
  if [ "\$grub_platform" = "efi" ]; then
    source /boot/grub/net.cfg
  else
    linux16 /ipxe.lkr
    initrd16 /metal.ipx
  fi
}
CFG
  grub-mkrescue -o "$out" "$stage" 2>/dev/null
else
  for f in /usr/lib/ISOLINUX/isolinux.bin /usr/lib/syslinux/modules/bios/ldlinux.c32; do
    [ -f "$f" ] || { echo "build-ipxe-iso: $f is missing (apt-get install isolinux syslinux-common)" >&2; exit 1; }
  done
  mkdir -p "$stage/isolinux"
  cp /usr/lib/ISOLINUX/isolinux.bin /usr/lib/syslinux/modules/bios/ldlinux.c32 "$stage/isolinux/"
  printf 'SERIAL 0 115200\nDEFAULT metal\nTIMEOUT 1\nLABEL metal\n  KERNEL /ipxe.lkr\n  INITRD /metal.ipx\n' \
    > "$stage/isolinux/isolinux.cfg"
  xorriso -as mkisofs -quiet -o "$out" -b isolinux/isolinux.bin -c isolinux/boot.cat \
    -no-emul-boot -boot-load-size 4 -boot-info-table -J -R -V METAL_IPXE "$stage"
fi
echo "build-ipxe-iso: $out ($(du -h "$out" | cut -f1)) boots through $url"
