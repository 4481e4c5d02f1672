package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	programName = "agentd"
)

// usageError is a mistake in how the command was called: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errReported is returned by a command that has already printed why it
// failed; execute prints nothing more and exits 1.
var errReported = errors.New("failure already reported")

// execute runs the command line in args and returns the exit code. It never
// calls os.Exit, so tests run it in-process.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	return exitCode(app.RunContext(ctx, args), stderr)
}

// exitCode maps what a command returned to the process exit code, saying
// why on stderr.
func exitCode(err error, stderr io.Writer) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		if ue.msg != "" {
			_, _ = fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' or '%s help COMMAND' for usage.\n", programName, ue.msg, programName, programName)
		}
		return exitUsage
	case errors.Is(err, errReported):
		return exitFailed
	default:
		_, _ = fmt.Fprintf(stderr, "%s: %v\n", programName, err)
		return exitFailed
	}
}

// newApp builds the command tree. urfave/cli flags carry parse state, so
// every run gets a fresh App.
func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	onUsage := func(_ *cli.Context, err error, _ bool) error {
		return &usageError{msg: err.Error()}
	}
	app := &cli.App{
		Name:  programName,
		Usage: "announce an agent's skills and find other agents, peer to peer",
		Description: "agentd runs beside an agent and makes it discoverable by skill and capability,\n" +
			"peer to peer, with no central server.\n\n" +
			"Configuration precedence, highest first: flags, AGENTD_* environment variables,\n" +
			"the --config file, defaults. See docs/operations.md.",
		Version:              buildVersion().Version,
		Reader:               stdin,
		Writer:               stdout,
		ErrWriter:            stderr,
		Flags:                globalFlags(),
		EnableBashCompletion: false,
		HideHelpCommand:      false,
		OnUsageError:         onUsage,
		ExitErrHandler:       func(*cli.Context, error) {}, // execute maps errors to exit codes
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("unknown command %q", c.Args().First())
			}
			// No command: print usage on stderr and exit 2.
			cli.HelpPrinter(c.App.ErrWriter, cli.AppHelpTemplate, c.App)
			return &usageError{}
		},
		Commands: []*cli.Command{
			versionCommand(),
			keygenCommand(),
			configCommand(),
			recordCommand(),
			runCommand(),
			bootstrapCommand(),
			simnetCommand(),
			certCommand(), keyCommand(), caCommand(), trustCommand(),
			skillcenterCommand(), skillCommand(),
			mcpCommand(),
		},
	}
	app.Commands = append(app.Commands, clientCommands()...)
	setUsageHandler(app.Commands, onUsage)
	return app
}

func setUsageHandler(cmds []*cli.Command, h cli.OnUsageErrorFunc) {
	for _, c := range cmds {
		c.OnUsageError = h
		setUsageHandler(c.Subcommands, h)
	}
}

// groupAction is the Action of a command that only holds subcommands: it
// reports an unknown subcommand, or prints the group's help.
func groupAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("%s: unknown command %q", c.Command.HelpName, c.Args().First())
	}
	cli.HelpPrinter(c.App.ErrWriter, cli.SubcommandHelpTemplate, c.Command)
	return &usageError{}
}

// emit writes what a command built in b to w and returns the write error
// (a closed pipe, a full disk), so output that did not arrive fails the
// command.
func emit(w io.Writer, b *strings.Builder) error {
	_, err := io.WriteString(w, b.String())
	return err
}

// oneArg returns the single positional argument of c or a usage error.
func oneArg(c *cli.Context, what string) (string, error) {
	switch c.NArg() {
	case 1:
		a := c.Args().First()
		if strings.HasPrefix(a, "-") && a != "-" {
			return "", usagef("%s: flags go before %s (got %q)", c.Command.HelpName, what, a)
		}
		return a, nil
	case 0:
		return "", usagef("%s: %s is required", c.Command.HelpName, what)
	default:
		return "", usagef("%s: takes one %s, got %d arguments (flags go before %s)", c.Command.HelpName, what, c.NArg(), what)
	}
}
