/* The thincuda command line: one function per subcommand. */
#ifndef TC_CLI_H
#define TC_CLI_H

/* `thincuda devices [--json]`: every device, its identity and its attributes. */
int tc_cli_devices(int argc, char **argv);

/* `thincuda generate --model PATH --prompt TEXT`: stream a continuation. */
int tc_cli_generate(int argc, char **argv);
/* `thincuda chat --model PATH`: an interactive chat in the model's template. */
int tc_cli_chat(int argc, char **argv);
/* `thincuda info --model PATH`: architecture, size and memory estimate. */
int tc_cli_info(int argc, char **argv);

/* `thincuda serve --model PATH`: the OpenAI-compatible HTTP server. */
int tc_cli_serve(int argc, char **argv);

/* `thincuda bench (--model PATH | --shape NAME)`: the engine's speed. */
int tc_cli_bench(int argc, char **argv);

#endif /* TC_CLI_H */
