package framework

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
)

// Keep is the ready function of Main for a package that only keeps the
// Env: it sets *env.
func Keep(env **Env) func(context.Context, *Env) error {
	return func(_ context.Context, e *Env) error {
		*env = e
		return nil
	}
}

// Main runs a test package in one environment, from its TestMain: it starts
// the environment and, unless opts.WithoutControllers, mcsd in every
// cluster; calls ready, which keeps the Env for the tests and may start more
// (CoreDNS, say); runs the tests; and tears everything down, even when they
// fail. It returns the exit code for os.Exit.
func Main(m *testing.M, opts Options, ready func(context.Context, *Env) error) int {
	if opts.ShortWithout {
		flag.Parse()
		if testing.Short() {
			return m.Run()
		}
	}
	ctx := context.Background()
	env, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start e2e environment:", err)
		return 1
	}
	defer func() {
		if err := env.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "close e2e environment:", err)
		}
	}()
	if !opts.WithoutControllers {
		if err := env.StartControllers(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "start controllers:", err)
			return 1
		}
	}
	if ready != nil {
		if err := ready(ctx, env); err != nil {
			fmt.Fprintln(os.Stderr, "prepare e2e environment:", err)
			return 1
		}
	}
	return m.Run()
}

// NeedEnv skips t when the package runs without its environment (-short,
// Options.ShortWithout): env is nil then.
func NeedEnv(t testing.TB, env *Env) {
	t.Helper()
	if env == nil {
		t.Skip("needs the testbed; skipped with -short")
	}
}
