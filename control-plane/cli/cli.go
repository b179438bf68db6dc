// Package cli implements allotctl's subcommands behind one entry point, Run.
// It owns argument parsing and output formatting only; the work is done by
// the packages it calls (offline eval: translate.Validate, then
// translate.FilterConfig and translate.Compile, the pipeline allotd and the
// proxies run; the other commands: the admin API). It never exits the process:
// errors go back to the thin main in control-plane/cmd/allotctl.
//
// To add a subcommand, write a func(ctx, *Env, args) error in its own file
// and add one line to the commands table below; help lists it automatically.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Env is what a subcommand may touch: its standard streams.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// command is one allotctl subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *Env, args []string) error
}

// commands lists the subcommands in help order. helpCmd is appended in init
// (it reads this table).
var commands = []command{
	{"eval", "evaluate experiment definitions offline (or online with --server) against attribute sets", runEvalDispatch},
	{"apply", "create or update experiments from a JSON/YAML file (idempotent)", runApply},
	{"rollout", "show which proxies run which configuration (applied, pending, rejected)", runRollout},
	{"get", "print one experiment", runGet},
	{"list", "list experiments (filters: --owner, --status, --service)", runList},
	{"delete", "delete an experiment", runDelete},
	{"start", "start a draft or paused experiment", transition("start", "Sets a draft or paused experiment running.")},
	{"pause", "pause a running experiment", transition("pause", "Pauses a running experiment: nobody is assigned until it starts again.")},
	{"stop", "stop an experiment for good", transition("stop", "Stops a draft, running or paused experiment for good.")},
	{"weights", "change an experiment's weights; assigned units keep their variation (or --rebucket, --exclude-previous)", runWeights},
	{"rebucket", "re-randomize every unit of an experiment (--exclude-previous: and exclude units assigned before)", runRebucket},
	{"history", "print the audit history of one or every experiment", runHistory},
	{"outcomes", "print an observed experiment's outcomes per variation: requests, share, error rate, latency", runOutcomes},
	{"whoami", "print the token's name, role and owner namespaces", runWhoAmI},
}

func init() {
	commands = append(commands, command{"help", "show help for allotctl or a subcommand", runHelp})
}

// ErrUsage marks command-line mistakes (unknown subcommand, bad flags).
var ErrUsage = errors.New("usage error")

// Run dispatches args (without the program name) to a subcommand.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	env := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	if len(args) == 0 {
		printUsage(stderr)
		return fmt.Errorf("%w: no subcommand given", ErrUsage)
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, env, args[1:])
		}
	}
	printUsage(stderr)
	return fmt.Errorf("%w: unknown subcommand %q", ErrUsage, name)
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "allotctl manages Allot experiments.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: allotctl <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "allotctl help <command>" for a command's flags.`)
}

func runHelp(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		printUsage(env.Stdout)
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] && c.name != "help" {
			// Every subcommand prints its flags on -h to stdout-bound env.
			return c.run(ctx, &Env{Stdin: env.Stdin, Stdout: env.Stdout, Stderr: env.Stdout}, []string{"-h"})
		}
	}
	return fmt.Errorf("%w: unknown subcommand %q (commands: %s)", ErrUsage, args[0], names())
}

func names() string {
	var n []string
	for _, c := range commands {
		n = append(n, c.name)
	}
	return strings.Join(n, ", ")
}
