// Command agentd is the agentd daemon and its command line: `agentd run`
// starts the node; the other commands create the identity, show the
// effective configuration, and validate, sign and verify agent records.
//
// Configuration precedence, highest first: command-line flags, AGENTD_*
// environment variables, the YAML file given by --config (AGENTD_CONFIG),
// the built-in defaults. docs/operations.md lists every key.
//
// Exit codes: 0 success, 1 failure (invalid input, a check that failed, a
// runtime error), 2 usage error (unknown command or flag, wrong arguments).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, restore the default behaviour so that a
	// second one kills a shutdown that hangs.
	context.AfterFunc(ctx, stop)
	code := execute(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
