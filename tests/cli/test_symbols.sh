#!/usr/bin/env bash
# libfathom.so exports exactly the functions declared in the public headers
# (include/fathom.h, include/fathom_model.h): no internal helper leaks, and
# no public function is missing. The declarations come from the compiler
# (gcc -aux-info lists every prototype with the file it is in), the exports
# from nm -D. Internal functions stay reachable from the static library,
# which the C tests link.
#   usage: test_symbols.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: test_symbols.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=$build/libfathom.so
[ -e "$lib" ] || { echo "SKIP: no $lib (shared library not built)"; exit 77; }
command -v nm >/dev/null || { echo "SKIP: nm missing"; exit 77; }
command -v gcc >/dev/null || { echo "SKIP: gcc missing (for -aux-info)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '#include "fathom.h"\n#include "fathom_model.h"\n' >"$tmp/all.c"
(cd "$tmp" && gcc -std=c11 -I"$root/include" -aux-info aux.txt -fsyntax-only all.c) ||
  { echo "FAIL: the public headers do not compile"; exit 1; }
# "/* .../include/fathom.h:54:NC */ extern const char *fathom_status_name (int);"
sed -n 's|^/\* .*/include/fathom\(_model\)\{0,1\}\.h:[0-9]*:[A-Z]* \*/ .*[ *]\([A-Za-z_][A-Za-z0-9_]*\) (.*|\2|p' \
  "$tmp/aux.txt" | sort -u >"$tmp/declared"
nm -D --defined-only "$lib" | awk '{ print $NF }' | grep -v '^_' | sort -u >"$tmp/exported"

fail=0
n_decl=$(wc -l <"$tmp/declared")
n_exp=$(wc -l <"$tmp/exported")
[ "$n_decl" -gt 100 ] || { echo "FAIL: only $n_decl declarations found in the public headers"; fail=1; }
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
  echo "FAIL: exported from libfathom.so but not declared in a public header:"; echo "$extra"; fail=1
fi
if [ -n "$missing" ]; then
  echo "FAIL: declared in a public header but not exported:"; echo "$missing"; fail=1
fi
[ $fail -eq 0 ] && echo "test_symbols: $n_exp exported = $n_decl declared"
exit $fail
