/* The thincuda command line: one function per subcommand. */
#ifndef TC_CLI_H
#define TC_CLI_H

/* `thincuda devices [--json]`: every device, its identity and its attributes. */
int tc_cli_devices(int argc, char **argv);

#endif /* TC_CLI_H */
