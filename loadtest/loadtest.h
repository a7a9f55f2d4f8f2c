/* loadtest/loadtest.h: colo-loadtest's command line, as a library function
 * so that tests run exactly what the program runs.
 *
 * loadtest_main parses argv (getopt_long; it resets getopt's state, so it may
 * be called repeatedly in one process, one call at a time), runs the
 * scenario, prints the table on stdout and writes the requested files.
 * Returns the process exit code: 0 all SLAs hold (or none given), 1 an SLA
 * failed, a model is unknown or failed to load, or a model got no successful
 * response in some phase; 2 usage or configuration error (message on
 * stderr). --help prints the usage on stdout and returns 0. */
#ifndef COLO_LOADTEST_LOADTEST_H
#define COLO_LOADTEST_LOADTEST_H

int loadtest_main(int argc, char **argv);

#endif
