/* thincuda: the command-line entry point, dispatching to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tc_bindings.h"

static const char usage[] =
    "usage: thincuda <command> [options]\n"
    "\n"
    "commands:\n"
    "  serve              the OpenAI-compatible HTTP server (--model PATH [--port N])\n"
    "  generate           continue a prompt with a model (--model PATH --prompt TEXT)\n"
    "  chat               talk with a model in its chat template (--model PATH)\n"
    "  info               a model's architecture, size and memory estimate (--model PATH)\n"
    "  bench              the engine's speed on a model or a named shape with random weights\n"
    "  devices [--json]   list CUDA devices with their identity and every driver attribute\n"
    "\n"
    "  thincuda <command> --help shows a command's options.\n"
    "\n"
    "  thincuda --version | --help\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("thincuda 0.1.0 (bindings from CUDA %d.%d headers)\n",
               TC_BINDINGS_CUDA_VERSION / 1000, TC_BINDINGS_CUDA_VERSION % 1000 / 10);
        return 0;
    }
    if (strcmp(cmd, "serve") == 0)
        return tc_cli_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "generate") == 0)
        return tc_cli_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "chat") == 0)
        return tc_cli_chat(argc - 1, argv + 1);
    if (strcmp(cmd, "info") == 0)
        return tc_cli_info(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return tc_cli_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "devices") == 0)
        return tc_cli_devices(argc - 1, argv + 1);
    fprintf(stderr, "thincuda: unknown command '%s'\n\n%s", cmd, usage);
    return 2;
}
