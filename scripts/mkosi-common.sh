# Sourced by scripts/build-mkosi-ramdisk and scripts/build-test-os (not run on its own): what
# both mkosi builds need from the host.
#
#   ensure_mkosi NAME      installs mkosi 24 from bookworm-backports (and zstd, cpio, the
#                          Debian keyring) when missing; NAME prefixes its messages
#   write_apt_sources DIR  writes DIR/etc/apt/sources.list.d/mkosi.sources, the apt sources
#                          mkosi uses, from the host's
#
# mkosi 24, not Debian 12's own mkosi 14 (which needs a systemd-nspawn wrapper here and
# builds a systemd image); it brings bubblewrap.

ensure_mkosi() {
  local name=$1 mirror
  if ! mkosi --version 2>/dev/null | grep -q '^mkosi 24\.' || ! command -v zstd >/dev/null; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "$name: adding bookworm-backports ($mirror)"
      cat > /etc/apt/sources.list.d/bookworm-backports.sources <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    echo "$name: installing mkosi from bookworm-backports"
    apt-get install -y -qq --no-install-recommends -t bookworm-backports mkosi >/dev/null
    apt-get install -y -qq --no-install-recommends zstd cpio debian-archive-keyring >/dev/null
  fi
  mkosi --version | grep -q '^mkosi 24\.' || { echo "$name: needs mkosi 24 (the definitions use 24's option names)" >&2; exit 1; }
}

# The Debian mirror (taken like scripts/setup-hil does) for bookworm and bookworm-updates,
# and the security mirror for bookworm-security (the kernel's security updates land there).
# Not mkosi's default Mirror= set: that adds the debian-debug repository, which mirrors and
# registries often do not carry.
write_apt_sources() {
  local dir=$1 mirror security
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(awk '/^URIs:/{uri=$2} /^Suites:.*bookworm-security/{print uri; exit}' \
    /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  security=${security:-http://deb.debian.org/debian-security}
  mkdir -p "$dir/etc/apt/sources.list.d"
  cat > "$dir/etc/apt/sources.list.d/mkosi.sources" <<SRC
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
}
