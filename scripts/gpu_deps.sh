#!/usr/bin/env bash
# Gathers what rlcpp's build takes from Debian, beyond a C++ compiler, CMake, LibTorch and CUDA, into
# one folder that a machine without Debian's packages and without a registry (the GPU machine of
# scripts/gpu_check.sh) builds and runs with: the headers, CMake and pkg-config files of the packages
# below, their shared libraries and the libraries those need (all but the C and C++ runtimes), laid
# out as a /usr of its own, its pkg-config files made relative to where they lie.
#
#   bash scripts/gpu_deps.sh [FOLDER]      (default: gpu-deps; also FOLDER.tar.xz, the one file to carry)
#   cmake -DCMAKE_PREFIX_PATH=FOLDER/usr ...; LD_LIBRARY_PATH=FOLDER/usr/lib/x86_64-linux-gnu at run time
#
# MPI and GoogleTest stay behind (the GPU build is one process and runs no unit tests). The libraries
# need glibc 2.34 and libstdc++ from GCC 12 or later (GLIBCXX_3.4.30): FOLDER/REQUIRES says so.
set -euo pipefail
OUT=$(realpath -m "${1:-gpu-deps}")

# A package of the list below whose headers or libraries the build reads; the last three because
# cpp-httplib's header includes OpenSSL's, zlib's and Brotli's.
PACKAGES=(
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libutf8proc-dev libhwy-dev libcpp-httplib-dev
  libssl-dev zlib1g-dev libbrotli-dev
)
# The C and C++ runtimes: the machine's own, never carried.
RUNTIME='^(libc|libm|libdl|libpthread|librt|libutil|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so'

for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "gpu_deps: the Debian package $p is not installed; run \`bash scripts/deps.sh\` first" >&2
    exit 1
  fi
done

rm -rf "$OUT" "$OUT.tar.xz"
mkdir -p "$OUT"
# Headers, CMake and pkg-config files, and each package's shared-library links.
dpkg -L "${PACKAGES[@]}" | grep -E '^/usr/(include|lib|share/cmake|share/pkgconfig)/' | grep -vE '\.a$' | sort -u |
  while read -r f; do
    if [ -f "$f" ] || [ -L "$f" ]; then (cd / && cp -a --parents "${f#/}" "$OUT"); fi
  done

libdir=usr/lib/x86_64-linux-gnu
find_system_lib() {
  for dir in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu; do
    if [ -e "$dir/$1" ]; then echo "$dir/$1"; return 0; fi
  done
  return 1
}
copy_lib() {  # a library by name: its file, and links to it by that name and by its soname
  local path name soname
  path=$(find_system_lib "$1") || { echo "gpu_deps: $1 (needed by a library carried) not found" >&2; exit 1; }
  path=$(readlink -f "$path")
  name=$(basename "$path")
  cp "$path" "$OUT/$libdir/$name"
  if [ "$1" != "$name" ]; then ln -sfn "$name" "$OUT/$libdir/$1"; fi
  soname=$(objdump -p "$path" | awk '/SONAME/ {print $2}')
  if [ -n "$soname" ] && [ "$soname" != "$name" ]; then ln -sfn "$name" "$OUT/$libdir/$soname"; fi
}
# Headers Debian keeps in its multiarch folder (OpenSSL's configuration), which only Debian's compilers
# search: beside the others.
if [ -d "$OUT/usr/include/x86_64-linux-gnu" ]; then
  cp -a "$OUT/usr/include/x86_64-linux-gnu/." "$OUT/usr/include/"
  rm -rf "$OUT/usr/include/x86_64-linux-gnu"
fi

# The libraries rlcpp links (the packages' other libraries stay behind), then what each needs.
LINKED=(libyaml-cpp.so libspdlog.so libfmt.so libpcre2-8.so libutf8proc.so libhwy.so libcpp-httplib.so)
for link in "$OUT/$libdir"/*.so; do
  name=$(basename "$link")
  if [[ " ${LINKED[*]} " == *" $name "* ]]; then copy_lib "$name"; else rm "$link"; fi
done
while true; do
  missing=()
  for lib in "$OUT/$libdir"/*.so.*; do
    [ -L "$lib" ] && continue
    while read -r needed; do
      if ! [[ "$needed" =~ $RUNTIME ]] && [ ! -e "$OUT/$libdir/$needed" ]; then missing+=("$needed"); fi
    done < <(objdump -p "$lib" | awk '/NEEDED/ {print $2}')
  done
  [ ${#missing[@]} -eq 0 ] && break
  for needed in $(printf '%s\n' "${missing[@]}" | sort -u); do copy_lib "$needed"; done
done

# pkg-config files: their prefix relative to where they lie.
for pc in "$OUT"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$OUT"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  case "$pc" in
    */lib/x86_64-linux-gnu/pkgconfig/*) up='${pcfiledir}/../../..' ;;
    *) up='${pcfiledir}/../..' ;;
  esac
  sed -i "s|^prefix=/usr\$|prefix=$up|" "$pc"
done

glibc=$(for lib in "$OUT/$libdir"/*.so.*; do objdump -T "$lib" 2>/dev/null; done | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1)
glibcxx=$(for lib in "$OUT/$libdir"/*.so.*; do objdump -T "$lib" 2>/dev/null; done | grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -uV | tail -1)
cat > "$OUT/REQUIRES" <<EOF
glibc ${glibc#GLIBC_}
libstdc++ ${glibcxx}
packages ${PACKAGES[*]}
EOF
# One file to carry: the folder compressed beside it.
tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")"
echo "gpu_deps: $(du -sh "$OUT" | cut -f1) in $OUT ($(find "$OUT" -type f | wc -l) files), $(du -sh "$OUT.tar.xz" | cut -f1) as $OUT.tar.xz; needs ${glibc} and ${glibcxx}"
