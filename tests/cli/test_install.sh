#!/usr/bin/env bash
# libfathom as a library: a plain build of the libraries and the CLI (no
# tests, no optimisation, so it stays quick; kept under BUILD_DIR/install-test
# so later runs are incremental), `cmake --install` with DESTDIR into a
# staging prefix, then examples/plan_and_select.c built against the staged
# copy three ways (find_package(fathom) -> fathom::fathom; pkg-config
# --static; pkg-config with the shared library) and run; the installed CLI
# runs; and a parent project that add_subdirectory()s this repository
# configures (tests and CLI off there) and builds the example.
# $1 is the build directory.
set -u
build="${1:?usage: test_install.sh BUILD_DIR}"
src="$(cd "$(dirname "$0")/../.." && pwd)"
for tool in cmake pkg-config cc; do
  command -v $tool >/dev/null || { echo "$tool missing: skip"; exit 77; }
done
work="$(cd "$build" && pwd)/install-test"
stage="$work/stage" prefix=/opt/fathom
rm -rf "$stage" "$work/example" "$work/parent" "$work"/bin-*
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
step() { echo "== $*"; }
quiet() { "$@" >"$work/log" 2>&1 || { echo "FAIL: $*"; tail -30 "$work/log"; return 1; }; }
# The sanitizer and fuzz flags of the enclosing build must not leak in.
unset CFLAGS LDFLAGS ASAN_OPTIONS UBSAN_OPTIONS

step "build (plain, libraries and CLI)"
quiet env -u CC cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=None -DFATHOM_SANITIZE=OFF \
  -DFATHOM_FUZZ=OFF -DFATHOM_CUDA=OFF -DFATHOM_BUILD_TESTS=OFF -DFATHOM_BUILD_BENCHES=OFF || exit 1
quiet cmake --build "$work/build" -j2 || exit 1

step "install with DESTDIR"
quiet env DESTDIR="$stage" cmake --install "$work/build" --prefix "$prefix" || exit 1
root="$stage$prefix"
libdir=$(cd "$root" && ls -d lib*/pkgconfig | head -1 | xargs dirname)
for f in "$libdir/libfathom.a" "$libdir/libfathom.so" include/fathom.h include/fathom_model.h \
         bin/fathom "$libdir/pkgconfig/fathom.pc" "$libdir/cmake/fathom/fathomConfig.cmake" \
         "$libdir/cmake/fathom/fathomConfigVersion.cmake" "$libdir/cmake/fathom/fathomTargets.cmake"; do
  [ -e "$root/$f" ] || bad "not installed: $f"
done
grep -q "^Requires.private: .*jansson libpcre2-8" "$root/$libdir/pkgconfig/fathom.pc" \
  || bad "fathom.pc lacks Requires.private"
grep -rq "$src" "$root/$libdir/cmake/fathom" && bad "the CMake files name the source tree"
"$root/bin/fathom" plan --var 1,1 --query 1,1 --budget 2 >/dev/null || bad "installed CLI does not run"

check_example() { # BINARY HOW
  out=$("$1" 2>&1) || { bad "$2: example failed: $out"; return; }
  grep -q "among them" <<<"$out" || bad "$2: unexpected output: $out"
  echo "   $2: $(tail -1 <<<"$out")"
}

step "example with find_package(fathom)"
if quiet cmake -S "$src/examples" -B "$work/example" -DCMAKE_PREFIX_PATH="$root" \
     && quiet cmake --build "$work/example"; then
  check_example "$work/example/plan_and_select" find_package
fi

step "example with pkg-config"
export PKG_CONFIG_PATH="$root/$libdir/pkgconfig"
# the static archive by name (-l:libfathom.a), then exactly what Libs.private
# and Requires.private add: proves they are complete
static_libs=$(pkg-config --libs --static fathom | sed 's/-lfathom\b/-l:libfathom.a/')
if quiet cc -o "$work/bin-static" "$src/examples/plan_and_select.c" $(pkg-config --cflags fathom) \
     $static_libs; then
  ldd "$work/bin-static" | grep -q libfathom && bad "static: still linked to libfathom.so"
  check_example "$work/bin-static" "pkg-config --static"
fi
if quiet cc -o "$work/bin-shared" "$src/examples/plan_and_select.c" \
     $(pkg-config --cflags --libs fathom) -lm -Wl,-rpath,"$root/$libdir"; then
  ldd "$work/bin-shared" | grep -q "$root/$libdir/libfathom.so" || bad "shared: not linked to the staged libfathom.so"
  check_example "$work/bin-shared" "pkg-config (shared)"
fi

step "add_subdirectory from a parent project"
mkdir -p "$work/parent"
cat >"$work/parent/CMakeLists.txt" <<EOF2
cmake_minimum_required(VERSION 3.20)
project(parent LANGUAGES C)
add_subdirectory("$src" fathom)
add_executable(app "$src/examples/plan_and_select.c")
target_link_libraries(app PRIVATE fathom::fathom m)
EOF2
if quiet cmake -S "$work/parent" -B "$work/parent/build" -DCMAKE_BUILD_TYPE=None; then
  targets=$(cmake --build "$work/parent/build" --target help)
  grep -q "test_store\|fathom_cli\|bench_scan" <<<"$targets" \
    && bad "add_subdirectory builds tests, CLI or benchmarks by default"
  if quiet cmake --build "$work/parent/build" -j2 --target app; then
    check_example "$work/parent/build/app" add_subdirectory
  fi
fi
[ $fail = 0 ] && echo "test_install: ok"
exit $fail
