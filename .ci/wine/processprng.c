/* Stand-in bcryptprimitives.dll for Wine 8, which lacks ProcessPrng.
 * Rust's std (1.78+) imports ProcessPrng from bcryptprimitives.dll for HashMap keys and
 * random seeding; without it every Rust .exe fails to start (status c0000135).
 * ProcessPrng is documented to always succeed; it is implemented here over RtlGenRandom
 * (advapi32!SystemFunction036), which takes a ULONG length, so large requests are chunked.
 * Built by setup.sh: x86_64-w64-mingw32-gcc -shared -O2 -s processprng.c processprng.def -ladvapi32 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length); /* RtlGenRandom */

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}

BOOL WINAPI DllMain(HINSTANCE inst, DWORD reason, LPVOID reserved)
{
    (void)inst; (void)reason; (void)reserved;
    return TRUE;
}
