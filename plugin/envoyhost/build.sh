#!/usr/bin/env bash
# Builds the test hosts of plugin/envoyhost: Envoy's own wasm host library
# (proxy-wasm-cpp-host) with WAMR, linked with the driver program in
# plugin/envoyhost/cpphost, once per WAMR mode:
#
#   $OUT/sluice-envoyhost-interp   WAMR fast interpreter
#   $OUT/sluice-envoyhost-jit      WAMR fast JIT (asmjit backend)
#
# OUT is $SLUICE_ENVOYHOST_DIR, else .cache/envoyhost under the repository.
#
# Sources: no third-party source is kept in the repository. With
# SLUICE_THIRD_PARTY set, the pinned archives are read from that directory and
# their sha256 checked against the table below (the same as in its README).
# Without it, the same pinned commits are downloaded from GitHub (codeload
# tarballs of the commits; those are whole-repository archives, so they have
# their own checksums: the commit id in the URL is the pin). SLUICE_SOURCE_BASE
# replaces https://codeload.github.com (a mirror with the same layout).
#
# Changes made to the sources at build time, exactly what a build of Envoy
# with WAMR would need too:
#   - WAMR gets the host's own bazel/external/wamr.patch (as the host's bazel
#     build applies it);
#   - src/wamr/wamr.cc: the instance is created with
#     wasm_instance_new_with_args(..., 1024 * 1024, 32 * 1024) instead of
#     wasm_instance_new (whose 32 KB stack a standard-Go module's _initialize
#     overflows under fast JIT: "wasm operand stack overflow"). Done by sed
#     below; the build fails if the line is not found.
#
# SLUICE_ENVOYHOST_PERFMAP=1 (profiling only, with SLUICE_ENVOYHOST_DIR set
# to another directory: the tests keep the unmodified host) makes WAMR's
# fast JIT append each compiled function to /tmp/perf-<pid>.map, so that
# `perf report` names the guest's functions (WAMR's own Linux perf support
# covers only its LLVM JIT and AOT modes). See docs/design/performance.md.
#
# A second run with the same pins, flags and C++ sources rebuilds nothing
# (stamp files keyed on all of them).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${SLUICE_ENVOYHOST_DIR:-$ROOT/.cache/envoyhost}"
CPPHOST="$ROOT/plugin/envoyhost/cpphost"
JOBS="${SLUICE_ENVOYHOST_JOBS:-$(nproc 2>/dev/null || echo 2)}"

# name|archive in SLUICE_THIRD_PARTY|sha256 of that archive|GitHub repository|commit
PINS=(
  "host|proxy-wasm-cpp-host-52a0291.tar.gz|453b48c8e105009b133ccc90f60160b54a4cdf6ee174ea416c63e5e7d335212c|proxy-wasm/proxy-wasm-cpp-host|52a02917b301c679ff43565064cffd2c3c750f6d"
  "sdk|proxy-wasm-cpp-sdk-7465dee.tar.gz|9db2ccbc58dc93351d54a511f46bf02cd3b815f1603014f40716dc5e79b46dec|proxy-wasm/proxy-wasm-cpp-sdk|7465dee8b2953beebff99f6dc3720ad0c79bab99"
  "wamr|wasm-micro-runtime-WAMR-2.4.1.tar.gz|0e05d1c6edfef3698ea837de8dcfeffffcb3dfb3bd4609487fea41c33e830f27|bytecodealliance/wasm-micro-runtime|b124f70345d712bead5c0c2393acb2dc583511de"
  "asmjit|asmjit-c1019f1.tar.gz|4f518f1f741054bb73263c8ba9bc2d80542d6018b29b74afbfedebffa4a0c884|asmjit/asmjit|c1019f1642a588107148f64ba54584b0ae3ec8d1"
)

# The WAMR configuration of the host's bazel/external/wamr.BUILD.
WAMR_COMMON=(
  -DWAMR_BUILD_LIBC_WASI=0 -DWAMR_BUILD_LIBC_BUILTIN=0
  -DWAMR_BUILD_BULK_MEMORY=1 -DWAMR_BUILD_REF_TYPES=1 -DWAMR_BUILD_TAIL_CALL=1
  -DWAMR_BUILD_MULTI_MODULE=0 -DWAMR_BUILD_CUSTOM_NAME_SECTION=1
  -DWAMR_BUILD_LOAD_CUSTOM_SECTION=1 -DWAMR_BUILD_DUMP_CALL_STACK=1
  -DWAMR_BUILD_WASM_CACHE=0 -DWAMR_BUILD_SIMD=0 -DWAMR_BUILD_AOT=0 -DWAMR_BUILD_JIT=0
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON
)
WAMR_INTERP=(-DWAMR_BUILD_FAST_INTERP=1 -DWAMR_BUILD_INTERP=1)
# Fast JIT: asmjit from the pinned archive (WAMR would otherwise clone it),
# and a 128 MB code cache: the cache is per process, the 10 MB default is
# exhausted by a second Go module.
JIT_CACHE="-DFAST_JIT_DEFAULT_CODE_CACHE_SIZE=134217728"
WAMR_JIT=(-DWAMR_BUILD_FAST_INTERP=0 -DWAMR_BUILD_INTERP=1 -DWAMR_BUILD_FAST_JIT=1
  -DFETCHCONTENT_FULLY_DISCONNECTED=ON)

die() { echo "envoyhost build: $*" >&2; exit 1; }

need_cmd() { # command, Debian package
  command -v "$1" >/dev/null 2>&1 ||
    die "'$1' not found: install the Debian package $2 (apt-get install g++ cmake ninja-build libssl-dev)"
}
need_cmd g++ g++
need_cmd cmake cmake
need_cmd ninja ninja-build
need_cmd tar tar
need_cmd sha256sum coreutils
if ! echo '#include <openssl/sha.h>' | g++ -x c++ -fsyntax-only - 2>/dev/null; then
  die "OpenSSL headers (openssl/sha.h) not found: install the Debian package libssl-dev"
fi

pin_field() { local IFS='|'; read -r -a f <<<"$1"; echo "${f[$2]}"; }

# Stamps: key over the pins, this script and the C++ sources.
key_of() { sha256sum | cut -c1-16; }
PIN_KEY="$(printf '%s\n' "${PINS[@]}" | key_of)"
SCRIPT_KEY="$(cat "$0" | key_of)"
CPP_KEY="$(cd "$CPPHOST" && find . -type f | LC_ALL=C sort | xargs cat | key_of)"
PERFMAP="${SLUICE_ENVOYHOST_PERFMAP:-0}"
if [ "$PERFMAP" = 1 ] && [ -z "${SLUICE_ENVOYHOST_DIR:-}" ]; then
  die "SLUICE_ENVOYHOST_PERFMAP=1 needs SLUICE_ENVOYHOST_DIR (another directory): the tests' host stays unmodified"
fi
FINAL_KEY="$PIN_KEY-$SCRIPT_KEY-$CPP_KEY-perfmap$PERFMAP"
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$FINAL_KEY" ] &&
  [ -x "$OUT/sluice-envoyhost-interp" ] && [ -x "$OUT/sluice-envoyhost-jit" ]; then
  echo "envoyhost: up to date in $OUT"
  exit 0
fi

START=$(date +%s)
mkdir -p "$OUT"
SRC="$OUT/src-$PIN_KEY"
BUILD="$OUT/build-$PIN_KEY"

# fetch NAME: unpacks the pinned source into $SRC/NAME (once).
fetch() {
  local name="$1" entry archive sha repo commit dest tmp
  for entry in "${PINS[@]}"; do
    [ "$(pin_field "$entry" 0)" = "$name" ] && break
  done
  archive="$(pin_field "$entry" 1)"; sha="$(pin_field "$entry" 2)"
  repo="$(pin_field "$entry" 3)"; commit="$(pin_field "$entry" 4)"
  dest="$SRC/$name"
  [ -f "$dest/.unpacked" ] && return 0
  rm -rf "$dest"; mkdir -p "$dest"
  if [ -n "${SLUICE_THIRD_PARTY:-}" ]; then
    [ -f "$SLUICE_THIRD_PARTY/$archive" ] ||
      die "SLUICE_THIRD_PARTY=$SLUICE_THIRD_PARTY has no $archive: point it at the directory of pinned archives (../shared/third_party), or unset it to download from GitHub"
    echo "$sha  $SLUICE_THIRD_PARTY/$archive" | sha256sum -c --quiet - >/dev/null 2>&1 ||
      die "$SLUICE_THIRD_PARTY/$archive: sha256 is not $sha (a different or damaged archive)"
    tar -xzf "$SLUICE_THIRD_PARTY/$archive" -C "$dest" --strip-components=1
  else
    need_cmd curl curl
    tmp="$OUT/download-$name.tar.gz"
    url="${SLUICE_SOURCE_BASE:-https://codeload.github.com}/$repo/tar.gz/$commit"
    echo "envoyhost: downloading $repo at $commit"
    curl -fsSL --retry 3 -o "$tmp" "$url" ||
      die "downloading $url failed: without network, set SLUICE_THIRD_PARTY to a directory holding $archive"
    # A whole-repository archive of the commit: its checksum is not the
    # trimmed archive's; the commit id is the pin. Print it for the record.
    echo "envoyhost: $(sha256sum "$tmp" | cut -c1-64)  $url"
    tar -xzf "$tmp" -C "$dest" --strip-components=1 || die "$url: not a gzip tar archive"
    rm -f "$tmp"
  fi
  touch "$dest/.unpacked"
}

fetch host; fetch sdk; fetch wamr; fetch asmjit

# Patches, once per unpacked tree.
if [ ! -f "$SRC/wamr/.patched" ]; then
  if command -v patch >/dev/null 2>&1; then
    patch -d "$SRC/wamr" -p1 --quiet <"$SRC/host/bazel/external/wamr.patch" ||
      die "applying the host's bazel/external/wamr.patch to WAMR failed"
  elif command -v git >/dev/null 2>&1; then
    (cd "$SRC/wamr" && git apply -p1 "$SRC/host/bazel/external/wamr.patch") ||
      die "applying the host's bazel/external/wamr.patch to WAMR failed"
  else
    die "'patch' not found: install the Debian package patch"
  fi
  touch "$SRC/wamr/.patched"
fi
if [ ! -f "$SRC/host/.patched" ]; then
  f="$SRC/host/src/wamr/wamr.cc"
  old='wasm_instance_new(store_.get(), module_.get(), &imports_vec, nullptr)'
  grep -qF "$old" "$f" || die "$f: the wasm_instance_new call to give a 1 MB stack is not there any more; update build.sh"
  sed -i 's/wasm_instance_new(store_.get(), module_.get(), &imports_vec, nullptr)/wasm_instance_new_with_args(store_.get(), module_.get(), \&imports_vec, nullptr, 1024 * 1024, 32 * 1024)/' "$f"
  grep -qF 'wasm_instance_new_with_args(store_.get()' "$f" || die "$f: stack-size change not applied"
  touch "$SRC/host/.patched"
fi

if [ "$PERFMAP" = 1 ] && [ ! -f "$SRC/wamr/.perfmap" ]; then
  f="$SRC/wamr/core/iwasm/fast-jit/jit_codecache.c"
  grep -q '^        cc->jitted_addr_begin;$' "$f" || die "$f: the line to add the perf map after is not there any more; update build.sh"
  awk '
    { print }
    /^#include "jit_codecache.h"$/ { print "#include <stdio.h>"; print "#include <unistd.h>" }
    /^        cc->jitted_addr_begin;$/ && !done {
      print "    { /* sluice profiling build: a perf map of the jitted functions */"
      print "        static FILE *perf_map;"
      print "        if (!perf_map) {"
      print "            char path[64];"
      print "            snprintf(path, sizeof(path), \"/tmp/perf-%d.map\", (int)getpid());"
      print "            perf_map = fopen(path, \"a\");"
      print "        }"
      print "        if (perf_map) {"
      print "            fprintf(perf_map, \"%lx %lx %s\\n\", (unsigned long)(uintptr_t)cc->jitted_addr_begin,"
      print "                    (unsigned long)((char *)cc->jitted_addr_end - (char *)cc->jitted_addr_begin),"
      print "                    func->field_name ? func->field_name : \"wasm-func\");"
      print "            fflush(perf_map);"
      print "        }"
      print "    }"
      done = 1
    }' "$f" >"$f.new" && mv "$f.new" "$f"
  touch "$SRC/wamr/.perfmap"
  rm -f "$BUILD/wamr-jit/.stamp"
fi

# build_wamr MODE FLAGS...: libiwasm.a into $BUILD/wamr-MODE.
build_wamr() {
  local mode="$1"; shift
  local dir="$BUILD/wamr-$mode" key
  key="$(printf '%s\n' "$@" | key_of)"
  if [ -f "$dir/libiwasm.a" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$key" ]; then return 0; fi
  echo "envoyhost: building WAMR ($mode)"
  cmake -S "$SRC/wamr" -B "$dir" -G Ninja "$@" >"$dir.log" 2>&1 ||
    { tail -30 "$dir.log" >&2; die "configuring WAMR ($mode) failed; log: $dir.log"; }
  ninja -C "$dir" -j "$JOBS" vmlib >>"$dir.log" 2>&1 ||
    { tail -30 "$dir.log" >&2; die "building WAMR ($mode) failed; log: $dir.log"; }
  [ -f "$dir/libiwasm.a" ] || die "WAMR ($mode) built no libiwasm.a; log: $dir.log"
  echo "$key" >"$dir/.stamp"
}
mkdir -p "$BUILD"
build_wamr interp "${WAMR_COMMON[@]}" "${WAMR_INTERP[@]}"
build_wamr jit "${WAMR_COMMON[@]}" "${WAMR_JIT[@]}" "-DFETCHCONTENT_SOURCE_DIR_ASMJIT=$SRC/asmjit" \
  "-DCMAKE_C_FLAGS=$JIT_CACHE" "-DCMAKE_CXX_FLAGS=$JIT_CACHE"

# The host library and our program (cpphost/CMakeLists.txt), both modes.
echo "envoyhost: building the host library and the driver program"
prog="$BUILD/cpphost"
cmake -S "$CPPHOST" -B "$prog" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DHOST_DIR="$SRC/host" -DSDK_DIR="$SRC/sdk" -DWAMR_DIR="$SRC/wamr" \
  -DWAMR_INTERP_LIB="$BUILD/wamr-interp/libiwasm.a" -DWAMR_JIT_LIB="$BUILD/wamr-jit/libiwasm.a" \
  >"$prog.log" 2>&1 || { tail -30 "$prog.log" >&2; die "configuring the driver program failed; log: $prog.log"; }
ninja -C "$prog" -j "$JOBS" >>"$prog.log" 2>&1 ||
  { grep -E 'error|Error' "$prog.log" | head -30 >&2; die "building the driver program failed; log: $prog.log"; }
# Copy then rename: a host program still running (a benchmark) keeps its file.
for b in sluice-envoyhost-interp sluice-envoyhost-jit; do
  cp "$prog/$b" "$OUT/$b.new" && mv -f "$OUT/$b.new" "$OUT/$b"
done
echo "$FINAL_KEY" >"$OUT/stamp"
echo "envoyhost: built $OUT/sluice-envoyhost-{interp,jit} in $(($(date +%s) - START))s"
