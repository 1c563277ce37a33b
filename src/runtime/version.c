/* tc_version: the library's own version, for programs that load it as a shared library. */
#include "runtime/version.h"

const char *tc_version(void)
{
    return TC_VERSION_STRING;
}
