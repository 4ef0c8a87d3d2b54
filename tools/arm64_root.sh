#!/usr/bin/env bash
# Prepare what the ARM64 check (tests/runtime/test_arm64.py) runs on: an
# aarch64 Python 3.11 from Debian's arm64 packages, LiteRT's aarch64
# wheel (the version installed here) with NumPy and its other
# dependencies unpacked beside it, and Debian's QEMU user-mode emulator.
#
#     bash tools/arm64_root.sh DIR
#
# Needs root (apt) and the package registries; the test itself then runs
# offline: `KERAS_ATTN_ARM64=DIR python -m pytest -m slow
# tests/runtime/test_arm64.py`. DIR/root is the emulator's root folder
# (`qemu-aarch64-static -L DIR/root`), DIR/site the Python packages.
set -euo pipefail
DIR="${1:?usage: tools/arm64_root.sh DIR}"
# DIR's root/, site/, debs/ and wheels/ are replaced: only in a new or
# empty folder, or one this script made (it leaves a marker file there).
MARKER=".keras_attn_arm64"
if [ -e "$DIR" ] && [ ! -e "$DIR/$MARKER" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
    echo "tools/arm64_root.sh: error: $DIR exists, is not empty and was not made by this script; give a new folder" >&2
    exit 2
fi
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
touch "$DIR/$MARKER"
PYTHON="${PYTHON:-python}"

if ! command -v qemu-aarch64-static >/dev/null 2>&1; then
    apt-get install -y -q qemu-user-static >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q qemu-user-static >/dev/null; }
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt-get update -q >/dev/null
fi

# Debian 12's Python 3.11 and the libraries it loads.
PACKAGES=(
    python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6
    libexpat1 zlib1g libffi8 libssl3 libbz2-1.0 liblzma5 libstdc++6
    libgcc-s1 libsqlite3-0 libuuid1 libncursesw6 libtinfo6 libreadline8
    libgomp1 libcrypt1 libnsl2 libtirpc3 libdb5.3
)
DEBS="$DIR/debs"
mkdir -p "$DEBS"
(cd "$DEBS" && apt-get download -q "${PACKAGES[@]/%/:arm64}" >/dev/null 2>&1)
rm -rf "$DIR/root"
for deb in "$DEBS"/*.deb; do
    dpkg -x "$deb" "$DIR/root"
done

# LiteRT reads /proc/cpuinfo to choose its kernels; under user-mode
# emulation it would read the host's x86 one and crash. The emulator
# looks under its root folder first: an Arm Neoverse-N1's (two cores).
mkdir -p "$DIR/root/proc"
for i in 0 1; do
    printf 'processor\t: %s\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n' "$i"
done >"$DIR/root/proc/cpuinfo"

# LiteRT's aarch64 wheel, the same version as here, and its dependencies.
LITERT="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("ai-edge-litert"))')"
NUMPY="$("$PYTHON" -c 'import numpy; print(numpy.__version__)')"
WHEELS="$DIR/wheels"
rm -rf "$WHEELS" "$DIR/site"
"$PYTHON" -m pip download -q --only-binary=:all: --python-version 3.11 \
    --implementation cp --platform manylinux_2_27_aarch64 \
    --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
    --platform any -d "$WHEELS" "ai-edge-litert==$LITERT" "numpy==$NUMPY" \
    flatbuffers protobuf ml_dtypes typing-extensions tqdm backports.strenum
mkdir -p "$DIR/site"
for wheel in "$WHEELS"/*.whl; do
    "$PYTHON" -m zipfile -e "$wheel" "$DIR/site"
done
echo "aarch64 root ready: $DIR (ai-edge-litert $LITERT, numpy $NUMPY)"
