#!/usr/bin/env bash
# ARM Linux CI for executa: cross-builds the release `hello` for aarch64 and armv7 (plus a
# static x86_64 musl `hello` and a crt-static aarch64 one) and runs the plugin-side tests
# (lib unit tests and tests/plugin_*.rs, with `--features mcp` as .ci/run does) under
# qemu-user. Runs as root on a fresh Debian 12 machine, no stdin; safe to run again.
#
# How the tests reach ARM plugins. Most plugin_* tests spawn example binaries that
# tests/common/mod.rs::example_bin builds with a nested `cargo build --example NAME`, for
# the target the test binary was built for (found from its own path, <target>/T/debug/deps)
# and beside it, so a cross test binary drives cross-built examples, never the host's. So
# this script:
#   - runs each test binary with CARGO_BUILD_TARGET=T, in a target dir of its own ($TD);
#   - checks afterwards that no x86_64 example was built for the tests ($TD/debug/examples);
#   - registers qemu-aarch64/qemu-arm with binfmt_misc so the ARM test binaries can exec
#     ARM binaries (examples, and CARGO_BIN_EXE_executa in plugin_mcp) directly. Debian's
#     qemu-user-binfmt does not register inside a container (its postinst skips it, and
#     there is no systemd-binfmt); as root we mount binfmt_misc and write the entries from
#     /usr/lib/binfmt.d by hand. /etc/qemu-binfmt/<arch> (qemu's built-in default -L) is
#     linked to the cross sysroots, because the MCP SDK tests start plugins with a scrubbed
#     environment (no QEMU_LD_PREFIX). If registration fails, the tests take their
#     examples from `exec qemu-ARCH -L SYSROOT` wrapper scripts (EXECUTA_EXAMPLES) and
#     the one test that execs an ARM binary other than an example (the executa host) is
#     skipped.
#
# Which tests run. Measured on the 2-vCPU Debian 12 VM (load 5-6 from other builds),
# debug test builds, one test binary at a time, seconds aarch64 / armv7: lib 7-9 / 6-8,
# plugin_flow 31-43 / 45-55, plugin_secrets 35-55 / 14-42, plugin_reply_bounds 11-18 /
# 8-19, plugin_inline 9-10 / 9, plugin_mcp 7-12 / 7-11, plugin_errors 5-8 / 7-14,
# randomized 8 / 9, the other eight 0-7 each. Every binary passed on both arches in every
# run (aarch64 4 runs, armv7 5). Test build from clean (load-dependent): aarch64 38-83 s,
# armv7 45-61 s, examples included; release hello 17-26 s each, crt-static 19-37 s.
#   aarch64: lib + every plugin_* test + randomized (the fuzz properties): ~110-170 s.
#   armv7:   the same except plugin_flow (bursts of 20,000 invokes and random sessions:
#            nothing word-size dependent, and the slowest binary) and plugin_secrets (a
#            /proc/PID/mem scan, which under qemu reads the emulator's host mappings, not
#            an ARM process's): ~70-85 s. The 32-bit checks stay: the 16 MiB frame
#            (plugin_errors), 17 MiB over-cap frames (plugin_mcp) and 10 MB requests
#            (plugin_reply_bounds) pass under qemu-arm.
# No test needs skipping for emulation while binfmt is registered (thread counts are by
# name, or before/after, so qemu's own thread does not show). One flake seen: plugin_flow's
# sigterm_answers_queued_invokes_at_once got no line for 60 s after SIGTERM, once in ~35
# aarch64 runs of plugin_flow (0 in 100 reruns of that test alone, 4 at a time), so a
# failing binary is run once more (ARM_RETRY=0: not) and a pass then is reported FLAKY. Whole script with the
# toolchains already installed: 6-8 min; apt and rustup on a fresh machine add 1-2 min.
# ARM_FULL=1 runs plugin_flow and plugin_secrets on armv7 too (+60-90 s); ARM_STATIC=0
# drops the crt-static aarch64 build (~30 s); ARM_BINFMT=0 leaves binfmt_misc alone
# (wrapper scripts, one skip); ARM_TARGET_DIR (default target/cross-arm) is the build dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive

TD=$(realpath -m "${ARM_TARGET_DIR:-target/cross-arm}")
ARM_FULL="${ARM_FULL:-0}"
ARM_STATIC="${ARM_STATIC:-1}"
ARM_RETRY="${ARM_RETRY:-1}"
ARM64=aarch64-unknown-linux-gnu
ARMV7=armv7-unknown-linux-gnueabihf
MUSL=x86_64-unknown-linux-musl
INVOKE='{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"greet","arguments":{"name":"Ada"}}}'
GREETING='{"jsonrpc":"2.0","id":1,"result":{"success":true,"data":{"greeting":"Hello, Ada."}}}'

step() { printf '\n==> %s\n' "$*"; }
now() { date +%s; }
summary=()
note() { summary+=("$*"); printf '%s\n' "$*"; }

step "packages"
need=()
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v arm-linux-gnueabihf-gcc >/dev/null || need+=(gcc-arm-linux-gnueabihf)
# The target's C library and start files (crti.o, Scrt1.o, libc.a): only recommended by the
# compilers, which `--no-install-recommends` leaves out.
[ -f /usr/aarch64-linux-gnu/lib/crti.o ] || need+=(libc6-dev-arm64-cross)
[ -f /usr/arm-linux-gnueabihf/lib/crti.o ] || need+=(libc6-dev-armhf-cross)
command -v qemu-aarch64 >/dev/null && command -v qemu-arm >/dev/null || need+=(qemu-user)
# The binfmt entries (also shipped by qemu-user-static, which provides qemu-user-binfmt).
[ -f /usr/lib/binfmt.d/qemu-aarch64.conf ] || need+=(qemu-user-binfmt)
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v python3 >/dev/null || need+=(python3)
# plugin_mcp's Python SDK goes into a virtualenv (tests/mcp/venv.sh).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v file >/dev/null || need+=(file)
if [ "${#need[@]}" -gt 0 ]; then
    echo "installing: ${need[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null
fi
installed=$(rustup target list --installed)
for t in $ARM64 $ARMV7 $MUSL; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
done
cargo --version

export CARGO_TARGET_DIR="$TD"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER=arm-linux-gnueabihf-gcc
export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_RUNNER="qemu-arm -L /usr/arm-linux-gnueabihf"

qemu_of() { case "$1" in $ARM64) echo aarch64 ;; $ARMV7) echo arm ;; esac; }
sysroot_of() { case "$1" in $ARM64) echo /usr/aarch64-linux-gnu ;; $ARMV7) echo /usr/arm-linux-gnueabihf ;; esac; }

step "binfmt_misc: let ARM binaries exec ARM binaries"
register_binfmt() {
    local dir=/proc/sys/fs/binfmt_misc q
    [ -e "$dir/register" ] || mount -t binfmt_misc binfmt_misc "$dir" 2>/dev/null || return 1
    for q in aarch64 arm; do
        if [ -e "$dir/qemu-$q" ]; then
            head -n1 "$dir/qemu-$q" | grep -qx enabled || echo 1 >"$dir/qemu-$q" || return 1
        else
            cat "/usr/lib/binfmt.d/qemu-$q.conf" >"$dir/register" 2>/dev/null || return 1
        fi
    done
    mkdir -p /etc/qemu-binfmt
    [ -e /etc/qemu-binfmt/aarch64 ] || ln -s /usr/aarch64-linux-gnu /etc/qemu-binfmt/aarch64
    [ -e /etc/qemu-binfmt/arm ] || ln -s /usr/arm-linux-gnueabihf /etc/qemu-binfmt/arm
}
binfmt=0
if [ "${ARM_BINFMT:-1}" = 1 ]; then
    register_binfmt && binfmt=1 || echo "binfmt_misc registration failed: wrapper scripts instead"
fi

size_of() { stat -c %s "$1"; }
check_hello() { # BIN [RUNNER...]: one invoke with an empty environment
    local bin=$1 reply
    shift
    reply=$(printf '%s\n' "$INVOKE" | env -i "$@" "$bin")
    [ "$reply" = "$GREETING" ] || { echo "unexpected reply from $bin: $reply"; return 1; }
}

step "release hello for $ARM64 and $ARMV7 (and static builds)"
for t in $ARM64 $ARMV7; do
    s=$(now)
    cargo build --release --example hello --target "$t"
    bin="$TD/$t/release/examples/hello"
    check_hello "$bin" "qemu-$(qemu_of "$t")" -L "$(sysroot_of "$t")"
    note "hello $t: $(size_of "$bin") bytes (build $(($(now) - s)) s, answers under qemu)"
done
if [ "$binfmt" = 1 ] && check_hello "$TD/$ARM64/release/examples/hello"; then
    echo "binfmt_misc runs $ARM64 binaries directly"
elif [ "$binfmt" = 1 ]; then
    echo "binfmt_misc registered but an ARM binary does not start: wrapper scripts instead"
    binfmt=0
fi
s=$(now)
cargo build --release --target $MUSL --example hello
bin="$TD/$MUSL/release/examples/hello"
file "$bin" | grep -q 'static' || { file "$bin"; echo "musl hello is not static"; exit 1; }
check_hello "$bin"
note "hello $MUSL (static): $(size_of "$bin") bytes (build $(($(now) - s)) s)"
if [ "$ARM_STATIC" = 1 ]; then
    # A target dir of its own: RUSTFLAGS would otherwise rebuild the dynamic one over it.
    s=$(now)
    CARGO_TARGET_DIR="$TD/crt-static" RUSTFLAGS='-C target-feature=+crt-static' \
        cargo build --release --target $ARM64 --example hello
    bin="$TD/crt-static/$ARM64/release/examples/hello"
    file "$bin" | grep -q 'statically linked' || { file "$bin"; echo "not static"; exit 1; }
    check_hello "$bin" qemu-aarch64
    note "hello $ARM64 crt-static: $(size_of "$bin") bytes (build $(($(now) - s)) s)"
fi

step "the MCP Python SDK for plugin_mcp"
bash tests/mcp/venv.sh

# Every tests/plugin_*.rs by name, and the fuzz properties (plugin side, no host feature).
all_plugin_tests="$(cd tests && ls plugin_*.rs | sed 's/\.rs$//') randomized"
failed=()

# Without binfmt_misc: wrapper scripts that start T's debug examples under qemu, in a
# folder the tests take their examples from (EXECUTA_EXAMPLES).
wrap_examples() {
    local t=$1 q sysroot name dir="$TD/qemu-examples/$1"
    q=$(qemu_of "$t")
    sysroot=$(sysroot_of "$t")
    mkdir -p "$dir"
    for name in $(cd examples && ls *.rs | sed 's/\.rs$//'); do
        printf '#!/bin/sh\nexec qemu-%s -L %s %s "$@"\n' "$q" "$sysroot" \
            "$TD/$t/debug/examples/$name" >"$dir/$name"
        chmod +x "$dir/$name"
    done
    export EXECUTA_EXAMPLES="$dir"
}

test_one() { # TARGET CARGO-TEST-ARGS...: one test binary under qemu, bounded
    local t=$1
    shift
    CARGO_BUILD_TARGET="$t" timeout -k 10 900 cargo test --quiet --features mcp "$@"
}

run_arch() { # TARGET TESTS...
    local t=$1 s name skip=()
    shift
    step "plugin-side tests for $t under qemu-user"
    s=$(now)
    cargo test --target "$t" --features mcp --lib $(printf -- '--test %s ' "$@") --no-run
    cargo build --target "$t" --features mcp --examples
    note "$t: test build $(($(now) - s)) s"
    rm -rf "$TD/debug/examples"
    # Without binfmt only examples are wrapped: the ARM `executa` host cannot exec.
    if [ "$binfmt" != 1 ]; then
        wrap_examples "$t"
        skip+=(--skip the_executa_host_drives_the_plugin_served_as_mcp)
    fi
    local total
    total=$(now)
    for name in lib "$@"; do
        local sel=(--test "$name")
        [ "$name" = lib ] && sel=(--lib)
        s=$(now)
        if test_one "$t" "${sel[@]}" -- "${skip[@]}"; then
            note "$t $name: ok ($(($(now) - s)) s)"
        elif [ "$ARM_RETRY" = 1 ] && echo "retrying $t $name once" &&
            test_one "$t" "${sel[@]}" -- "${skip[@]}"; then
            note "$t $name: FLAKY, failed once then passed ($(($(now) - s)) s)"
        else
            note "$t $name: FAILED ($(($(now) - s)) s)"
            failed+=("$t $name")
        fi
    done
    unset EXECUTA_EXAMPLES
    # The run must have driven ARM plugins: no test built host examples for itself.
    [ ! -e "$TD/debug/examples/everything" ] ||
        { note "$t: the tests built x86_64 examples"; failed+=("$t examples"); }
    file -L "$TD/$t/debug/examples/everything" | grep -q 'ARM\|aarch64' ||
        { note "$t: no ARM everything"; failed+=("$t examples"); }
    note "$t: tests $(($(now) - total)) s"
}

# shellcheck disable=SC2086
run_arch $ARM64 $all_plugin_tests
if [ "$ARM_FULL" = 1 ]; then
    # shellcheck disable=SC2086
    run_arch $ARMV7 $all_plugin_tests
else
    # shellcheck disable=SC2086
    run_arch $ARMV7 $(tr ' ' '\n' <<<"$all_plugin_tests" | grep -vx -e plugin_flow -e plugin_secrets)
fi

step "summary"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}"
    exit 1
fi
