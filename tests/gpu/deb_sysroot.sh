# Sourced by the device-machine scripts (tests/gpu/run_device.sh, bench/peer/llama_cpp_cuda.sh): the GPU
# machine has no cJSON / Oniguruma / utf8proc and no package registry, so their carried .debs are unpacked
# into /tmp/sysroot and make is pointed at it. Sets the array X to make's extra arguments (empty when
# DEBDIR holds no .debs, i.e. the libraries are installed).
deb_sysroot_args() {
    X=()
    ls "$1"/*.deb >/dev/null 2>&1 || return 0
    local f L=/tmp/sysroot/usr/lib/x86_64-linux-gnu
    for f in "$1"/*.deb; do dpkg -x "$f" /tmp/sysroot; done
    X=(EXTRA_CFLAGS=-I/tmp/sysroot/usr/include "EXTRA_LDFLAGS=-L$L -Wl,-rpath,$L")
}
