#!/usr/bin/env bash
# check_install.sh BUILD: what a user gets from `cmake --install` and from the .deb, checked.
#   1. cmake --install BUILD into a fresh prefix: the expected tree, `ckpt --version`,
#      `ckpt validate` on a fixture, every man page renders, the bash completion completes,
#      and a find_package(ckptkit) consumer (tests/consumer) builds and runs against it.
#   2. BUILD/ckptkit_*.deb: its control data and file list (dpkg-deb -I / -c), every shared
#      library the binaries need is in a package it Depends on, then unpacked into a fresh
#      root (dpkg-deb -x) and run from there: --version, validate, man -l; then installed
#      with dpkg -i into a second fresh root whose dpkg status is a copy of this machine's
#      (so Depends must resolve) and run from there.
#   3. Only with CKPT_DPKG_INSTALL=1 (set by .ci/run; CI is a throwaway root machine):
#      dpkg -i, then /usr/bin/ckpt and the consumer against /usr, then dpkg -r.
# Prints what it runs; exits non-zero at the first failure. Never writes inside the tree
# except BUILD/install-check/ (scratch, replaced on every run).
set -euo pipefail
build=$(cd "${1:?usage: check_install.sh BUILD}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
fixture=$src/tests/fixtures/oracle/dsv4-tiny
gguf=$src/tests/fixtures/ggml/qwen3next-tiny.gguf
work=$build/install-check
rm -rf "$work"
mkdir -p "$work"
fail() { echo "check_install: FAIL: $*" >&2; exit 1; }
step() { echo; echo "== $*"; }

check_tree() {  # ROOT (a prefix such as /usr, or DIR/usr)
  local p=$1 f
  for f in bin/ckpt bin/ckpt-gpu share/ckptkit/schemas/validation-report.schema.json \
           share/ckptkit/schemas/convert-report.schema.json share/ckptkit/schemas/profiles \
           share/man/man1/ckpt.1 share/man/man1/ckpt-validate.1 share/man/man1/ckpt-convert.1 \
           share/man/man1/ckpt-gpu.1 share/bash-completion/completions/ckpt \
           share/bash-completion/completions/ckpt-gpu include/ckptkit/formats/loader.h \
           include/ckptkit/core/build_info.h lib/ckptkit/libconvert.a lib/cmake/ckptkit/ckptkitConfig.cmake \
           lib/cmake/ckptkit/ckptkitConfigVersion.cmake lib/cmake/ckptkit/ckptkitTargets.cmake; do
    [ -e "$p/$f" ] || fail "$p/$f is missing"
  done
  local n
  n=$(find "$p/share/man/man1" -name 'ckpt-*.1' | wc -l)
  [ "$n" -ge 8 ] || fail "only $n ckpt-*.1 man pages in $p/share/man/man1"
}

run_binaries() {  # BIN_DIR: --version names version and commit, validate passes, ckpt-gpu runs
  local bin=$1 v
  v=$("$bin/ckpt" --version)
  echo "$v"
  [[ $v =~ ^ckptkit\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ [0-9a-zA-Z._+-]+\)$ ]] || fail "ckpt --version: '$v'"
  v=$("$bin/ckpt-gpu" --version)
  echo "$v"
  [[ $v =~ ^ckptkit\ [0-9] ]] || fail "ckpt-gpu --version: '$v'"
  "$bin/ckpt" validate "$fixture" | tail -1
  "$bin/ckpt" validate --deep "$gguf" | tail -1
  "$bin/ckpt" validate --json - "$fixture" | python3 -c 'import json,sys; t=json.load(sys.stdin)["tool"]; print("report tool:", t); assert t["commit"]'
  # No GPU here is exit 4; the emulation runs the kernels' arithmetic on the host.
  "$bin/ckpt-gpu" verify --backend emulate "$gguf" | tail -1
}

render_man() {  # MAN_DIR
  local page out
  if ! command -v man >/dev/null; then echo "(man is not installed: pages not rendered)"; return 0; fi
  for page in "$1"/*.1; do
    out=$(MANWIDTH=100 MANPAGER=cat man -l "$page" 2>&1) || fail "man -l $page: $out"
    grep -q "OPTIONS\|ARGUMENTS" <<<"$out" || fail "man -l $page has no OPTIONS section"
    if grep -q "warning:" <<<"$out"; then fail "man -l $page: $(grep warning: <<<"$out" | head -3)"; fi
  done
  echo "$(ls "$1"/*.1 | wc -l) man pages render without warnings; man -l ckpt-validate.1:"
  MANWIDTH=100 MANPAGER=cat man -l "$1/ckpt-validate.1" | sed -n 1,30p
}

check_completion() {  # COMPLETIONS_DIR
  bash -n "$1/ckpt" && bash -n "$1/ckpt-gpu" || fail "completion scripts do not parse"
  local got
  got=$(bash -c 'source "$1/ckpt"; COMP_WORDS=(ckpt val); COMP_CWORD=1; _ckpt; echo "${COMPREPLY[*]}"' _ "$1")
  [ "$got" = validate ] || fail "completion of 'ckpt val' gave '$got'"
  got=$(bash -c 'source "$1/ckpt"; COMP_WORDS=(ckpt validate --de); COMP_CWORD=2; _ckpt; echo "${COMPREPLY[*]}"' _ "$1")
  [ "$got" = --deep ] || fail "completion of 'ckpt validate --de' gave '$got'"
  echo "bash completion: 'ckpt val' -> validate, 'ckpt validate --de' -> --deep"
}

build_consumer() {  # PREFIX (empty: the system's)
  local b=$work/consumer-$RANDOM
  cmake -S "$src/tests/consumer" -B "$b" ${1:+-DCMAKE_PREFIX_PATH=$1} -DCMAKE_BUILD_TYPE=Release >"$b.log" 2>&1 \
    || { cat "$b.log"; fail "consumer: configure against ${1:-/usr}"; }
  cmake --build "$b" >>"$b.log" 2>&1 || { cat "$b.log"; fail "consumer: build against ${1:-/usr}"; }
  "$b/consumer" "$fixture"
  "$b/consumer" "$gguf"
}

# --- 1. cmake --install into a fresh prefix ---------------------------------------------
prefix=$work/prefix
step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
check_tree "$prefix"
(cd "$prefix" && find . -type f -o -type l | sed 's|^\./||' | sort | awk '
  /^include\/ckptkit\// { h++; next } /^share\/ckptkit\/schemas\/profiles\// { pr++; next } { print }
  END { printf "include/ckptkit/... (%d headers)\nshare/ckptkit/schemas/profiles/... (%d profiles)\n", h, pr }')
run_binaries "$prefix/bin"
render_man "$prefix/share/man/man1"
check_completion "$prefix/share/bash-completion/completions"
step "find_package(ckptkit) consumer against $prefix"
build_consumer "$prefix"

# --- 2. the .deb, unpacked into a fresh root ------------------------------------------------
deb=$(ls "$build"/ckptkit_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "no $build/ckptkit_*.deb (run cpack -G DEB in $build)"
step "dpkg-deb -f $(basename "$deb") (the control fields)"
dpkg-deb -f "$deb"
step "dpkg-deb -c $(basename "$deb") (headers and profiles counted)"
dpkg-deb -c "$deb" | awk '{print $6}' | awk '
  /^\.\/usr\/include\/ckptkit\/.+\.h$/ { h++; next } /^\.\/usr\/share\/ckptkit\/schemas\/profiles\/.+/ { pr++; next }
  /\/$/ { next } { print } END { printf "./usr/include/ckptkit/... (%d headers)\n./usr/share/ckptkit/schemas/profiles/... (%d profiles)\n", h, pr }'
depends=$(dpkg-deb -f "$deb" Depends)
step "every NEEDED library is in a Depends package"
root=$work/root
dpkg-deb -x "$deb" "$root"
for exe in "$root"/usr/bin/*; do
  for lib in $(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !seen { print $NF; seen = 1 }')  # no early exit: SIGPIPE under pipefail
    [ -n "$path" ] || fail "$(basename "$exe") needs $lib, which this machine lacks"
    real=$(readlink -f "$path")
    pkg=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "/usr$path" 2>/dev/null || true)
    pkg=${pkg%%:*}
    [ -n "$pkg" ] || fail "$lib ($path) belongs to no Debian package"
    tr ',' '\n' <<<"$depends" | awk '{print $1}' | grep -xF "$pkg" >/dev/null || fail "$(basename "$exe") needs $lib from $pkg, not in Depends: $depends"
    echo "$(basename "$exe"): $lib <- $pkg"
  done
done
step "run from the unpacked root $root"
check_tree "$root/usr"
run_binaries "$root/usr/bin"
render_man "$root/usr/share/man/man1" >/dev/null
echo "man pages of the .deb render"

# --- 2b. dpkg -i into a fresh root, dependencies checked against this system's packages ----
step "dpkg --root=FRESH -i $(basename "$deb") (the Depends resolved against this machine's dpkg status)"
droot=$work/dpkg-root
mkdir -p "$droot/var/lib/dpkg/info" "$droot/var/lib/dpkg/updates"
cp /var/lib/dpkg/status "$droot/var/lib/dpkg/status"
dpkg --root="$droot" --force-not-root --force-script-chrootless -i "$deb" >"$work/dpkg-root.log" 2>&1 \
  || { cat "$work/dpkg-root.log"; fail "dpkg -i into $droot"; }
dpkg --root="$droot" -s ckptkit | grep -E '^(Status|Version):'
echo "$(dpkg --root="$droot" -L ckptkit | wc -l) paths installed under $droot"
run_binaries "$droot/usr/bin"

# --- 3. dpkg -i on the (throwaway) CI machine ---------------------------------------------
if [ "${CKPT_DPKG_INSTALL:-0}" = 1 ] && [ "$(id -u)" -eq 0 ]; then
  step "dpkg -i $(basename "$deb")"
  dpkg -i "$deb"
  run_binaries /usr/bin
  if command -v man >/dev/null; then MANPAGER=cat MANWIDTH=100 man ckpt-convert | sed -n 1,12p; fi
  step "find_package(ckptkit) consumer against /usr"
  build_consumer ""
  dpkg -r ckptkit >/dev/null
  echo "dpkg -r ckptkit: removed"
else
  echo; echo "(dpkg -i skipped: set CKPT_DPKG_INSTALL=1 as root on a throwaway machine, as .ci/run does)"
fi
echo; echo "check_install: all checks passed"
