/* loadtest/loadtest_main.c: the colo-loadtest program. */
#include "loadtest/loadtest.h"

int main(int argc, char **argv)
{
    return loadtest_main(argc, argv);
}
