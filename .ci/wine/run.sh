#!/usr/bin/env bash
# Cargo runner for x86_64-pc-windows-gnu: runs a Windows .exe under Wine 8.
#   CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=<repo>/.ci/wine/run.sh
#   run.sh prog.exe [args...]
# The program's exit code is wine's exit status (low 8 bits; an NTSTATUS crash code such as
# 0xC0000005 shows up as 5). Run .ci/wine/setup.sh once first (prefix + ProcessPrng DLL).
set -eu
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export WINEPREFIX=${WINEPREFIX:-$here/../../target/wine-prefix}
export WINEDEBUG=${WINEDEBUG:--all}
export WINEDLLOVERRIDES=${WINEDLLOVERRIDES:-mscoree,mshtml=}
export WINELOADER=/usr/lib/wine/wine64
export WINESERVER=/usr/lib/wine/wineserver
if [ ! -f "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ]; then
    echo "run.sh: $WINEPREFIX is not set up; run .ci/wine/setup.sh first" >&2
    exit 127
fi
exec /usr/lib/wine/wine64 "$@"
