#!/bin/sh
# Rebuilds the WebAssembly kernels of the loudness meter and the waveform peaks from their C source (npm run build:wasm):
#   scripts/build-wasm.sh [output, default src/audio/wasm/loudness-kernels.wasm]
# Needs clang and wasm-ld 14 (Debian bookworm's clang and lld packages), the version the committed
# .wasm was built with: test/unit/loudness-kernels-wasm.test.ts rebuilds it and expects the same
# bytes. Building or running the service needs neither: the .wasm is committed.
set -eu
cd "$(dirname "$0")/.."
out=${1:-src/audio/wasm/loudness-kernels.wasm}
exec clang --target=wasm32 -O3 -msimd128 -nostdlib -ffreestanding \
  -Wall -Wextra -Werror \
  -Wl,--no-entry -Wl,--strip-all -Wl,-z,stack-size=4096 \
  -o "$out" src/audio/wasm/loudness-kernels.c
