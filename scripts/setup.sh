#!/usr/bin/env bash
# setup.sh — install piper's build dependencies from Debian 12 packages and build piper into
# ./build. Safe to run again. Runs apt-get through sudo when not root.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libyaml-dev libcunit1-dev libopenblas-dev)
# The simulator (sim/, piper-sim) replays plans on SimGrid 3.32.
PACKAGES+=(libsimgrid-dev)
# The CPU executor (piper-exec) runs one MPI rank per device on OpenMPI.
PACKAGES+=(openmpi-bin libopenmpi-dev)
# Fuzzing and the sanitizer build use clang's runtimes.
PACKAGES+=(clang libclang-rt-14-dev)
# The figures (viz/, piper-viz) render through Graphviz's gvc in the one font they name.
PACKAGES+=(libgraphviz-dev fonts-dejavu-core)
# Chakra execution traces (chakra/, --emit-chakra) are packed with protobuf-c: protoc-c generates
# the message code at build time, libprotobuf-c links it.
PACKAGES+=(protobuf-c-compiler libprotobuf-c-dev)
# The Chakra test's independent reader (tests/chakra/) decodes the traces with Google's protobuf
# for Python, from a module protoc generates at test time.
PACKAGES+=(python3-protobuf protobuf-compiler)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo ${PIPER_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$(nproc)"
