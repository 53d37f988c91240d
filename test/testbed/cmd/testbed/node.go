package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/test/testbed/agent"
)

// The commands the testbed runs itself, not meant for people: the node
// agent, and the small programs it runs inside network namespaces.
var nodeCommands = map[string]func(args []string) error{
	"agent":    runAgent,
	"relay":    runRelay,
	"pause":    runPause,
	"pod-init": runPodInit,
	"probe":    runProbe,
}

func runAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	config := fs.String("config", "", "the agent's configuration (JSON), written by the testbed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := agent.Load(*config)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	a, err := agent.New(cfg, self, klog.NewKlogr().WithValues("cluster", cfg.Cluster))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx)
}

func runRelay(args []string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	listen := fs.String("listen", "", "TCP address to listen on")
	to := fs.String("to", "", "Unix socket to forward to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return agent.RunRelay(*listen, *to)
}

// runPause is the pause image's program: it waits for a signal.
func runPause([]string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}

// runPodInit sets the host name of the UTS namespace it runs in (the pod's
// own) and becomes the container's program.
func runPodInit(args []string) error {
	fs := flag.NewFlagSet("pod-init", flag.ContinueOnError)
	hostname := fs.String("hostname", "", "the pod's host name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return errors.New("pod-init: no command")
	}
	if *hostname != "" {
		if err := syscall.Sethostname([]byte(*hostname)); err != nil {
			return fmt.Errorf("set host name: %w", err)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}

func runProbe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	httpURL := fs.String("http", "", "URL that must answer 200")
	dnsServer := fs.String("dns", "", "DNS server (host:port) that must answer for clusterset.local")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return agent.Probe(*httpURL, *dnsServer)
}
