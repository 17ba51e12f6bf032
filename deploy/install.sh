#!/usr/bin/env bash
# Install actorlog into ./.venv on Debian (12+) with Python 3.11+.
#   deploy/install.sh          runtime only
#   deploy/install.sh --test   plus everything the test suite needs (kcat, a JDK for
#                              Spark, ZooKeeper, iproute2, nftables, openssh, the
#                              test/bench/spark extras)
#   deploy/install.sh --zookeeper
#                              plus the Debian zookeeper package, for a node of a cluster
#                              (`zookeeper.connect`) or to run a ZooKeeper with
#                              `.venv/bin/python -m actors.metadata.zk_server --dir DIR --port 2181`
# System packages come from apt-get (as root, or through sudo when it exists).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_zookeeper=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1; want_zookeeper=1 ;;
    --zookeeper) want_zookeeper=1 ;;
    *) echo "usage: $0 [--test] [--zookeeper]" >&2; exit 2 ;;
  esac
done

apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "installing Debian packages: ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

PY="${PYTHON:-python3}"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "actorlog needs Python 3.11+"'

if command -v dpkg-query >/dev/null; then
  pkgs=()
  "$PY" -c 'import venv, ensurepip' 2>/dev/null || pkgs+=(python3-venv)
  # The leader append's C part (actors/core/_batch_fast.c, built by pip install): a C
  # compiler and the headers of the Python that builds it. Without them pip still
  # installs, and actorlog runs that part's Python twin, slower.
  command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)
  "$PY" -c 'import os, sysconfig, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || pkgs+=(python3-dev)
  if [ "$want_test" -eq 1 ]; then
    command -v kcat >/dev/null || pkgs+=(kcat)
    command -v java >/dev/null || pkgs+=(openjdk-17-jre-headless)
    # Test hosts (network namespaces, `cluster` fault injection): ip and tc, nft;
    # the ssh path: a real sshd started by the tests inside a test host. (Debian's
    # openssh-server package also enables the ssh service where systemd runs.)
    command -v ip >/dev/null || pkgs+=(iproute2)
    command -v tc >/dev/null || pkgs+=(iproute2)
    command -v nft >/dev/null || pkgs+=(nftables)
    command -v ssh >/dev/null || pkgs+=(openssh-client)
    [ -x /usr/sbin/sshd ] || pkgs+=(openssh-server)
  fi
  if [ "$want_zookeeper" -eq 1 ]; then
    # The server (QuorumPeerMain) from /usr/share/java/zookeeper.jar, with a JRE.
    [ -e /usr/share/java/zookeeper.jar ] || pkgs+=(zookeeper)
  fi
  [ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ "$want_test" -eq 1 ]; then
  .venv/bin/python -m pip install -q -e ".[test,bench,spark]"
else
  .venv/bin/python -m pip install -q -e .
fi
# The codecs compression.type re-encodes with (runtime dependencies: wheels, no apt
# package); a broker without them would refuse such topics' produce requests.
.venv/bin/python -c 'import lz4.frame, snappy, zstandard' \
  || { echo "the compression codecs (lz4, python-snappy, zstandard) did not install" >&2; exit 1; }
if [ "$want_test" -eq 1 ]; then
  # The tests run the C append path, so it must have been built (CI fails here if not).
  .venv/bin/python -c 'from actors.core import batch_fast; assert batch_fast.COMPILED' \
    || { echo "actors/core/_batch_fast.c was not built (gcc, python3-dev?)" >&2; exit 1; }
fi
echo "actorlog installed in $(pwd)/.venv"
